"""docs/dictionaries.md stays runnable: its Python blocks run in order in a temporary folder."""

from __future__ import annotations

import pytest
from doc_blocks import DOCS, run_doc


@pytest.mark.slow  # a whole document: a model, two dictionaries, a two-site transcoder
def test_dictionaries_docs_examples_run(tmp_path, capsys):
    # the two-block model without its checkpoint analyses (summary, Fourier, attention plots): only its MLPs are read
    run_doc(DOCS / "dictionaries.md", {"/tmp/lenscope-dictionaries-demo": str(tmp_path),
                                       '"model/n_layers=2", "training/steps=20"':
                                       '"model/n_layers=2", "training/analyze=false", "training/steps=20"'},
            min_blocks=9)
    out = capsys.readouterr().out
    assert "(5, 256) 8 (5, 32)\nTrue\n(5, 32)\n" in out
    assert "['W_dec', 'W_enc', 'b_dec', 'b_enc', 'b_mag', 'r_mag', 'threshold'] (32, 128, 256)\n" in out
    assert "10000 True True\n" in out
    assert "True\nTrue 4.0\n" in out
    assert "['eval/ce_loss_score', 'eval/ce_loss_with_ablation', 'eval/ce_loss_with_sae', " \
           "'eval/ce_loss_without_sae']\nTrue True\n" in out
    assert "2 True True\n" in out and "(158, 3, 128) True\nTrue\n" in out
    assert "transcoder True" in out
    assert "(128, 2) 5 True\n" in out  # latent_frequencies on the docs' SAE
