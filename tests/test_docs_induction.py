"""docs/induction.md stays runnable: its Python blocks run in order, the study at a few steps on a tiny corpus."""

from __future__ import annotations

import numpy as np
import pytest
from doc_blocks import DOCS, python_blocks, run_doc

pytest.importorskip("tokenizers")

DOC = DOCS / "induction.md"
WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "tau", "rho"]


def test_induction_docs_examples_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    (tmp_path / "text").mkdir()
    for name in ("one.txt", "two.txt"):
        (tmp_path / "text" / name).write_text("\n".join(" ".join(rng.choice(WORDS, 40)) for _ in range(30)))
    small = [f"data/text={tmp_path / 'text'}", "model/d_model=16", "model/n_heads=2", "model/d_mlp=32",
             "data/vocab_size=280", "data/seq_len=24", "data/validation_fraction=0.2", "analysis/repeat_len=8",
             "analysis/repeat_rows=4", "analysis/text_rows=4", "training/steps=4", "training/batch_size=4",
             "logging/validation_interval=2", "logging/checkpoint_interval=4", "logging/eval_batches=1"]
    assert len(python_blocks(DOC)) == 3
    namespace = run_doc(DOC, {"overrides = []": f"overrides = {small!r}"})
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("main main ") and out[1].startswith("control control ")
    assert out[0].split()[-1] in {"L0H0", "L0H1", "L1H0", "L1H1"} and out[1].split()[-1] in {"L0H0", "L0H1"}
    assert out[2:] == ["2 True", "True", "True True"]
    namespace["store"].close()
