"""docs/models.md stays runnable: its NNX and Equinox examples run, in order, against a fresh store."""

from __future__ import annotations

from doc_blocks import DOCS, run_doc


def test_models_docs_examples_run(tmp_path, capsys):
    namespace = run_doc(DOCS / "models.md", {'"/tmp/lenscope-models-demo"': repr(str(tmp_path / "demo"))},
                        min_blocks=4)
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["True", "['mean', 'var']", "100"]
    assert out[3:5] == ["True", "['', 'blocks/0', 'blocks/1', 'norm', 'drop', 'head']"]
    assert out[5].startswith("BatchNorm DebugInputs(x: float32[128,32]")
    assert out[6:] == ["['blocks/0', 'blocks/1']", "True", "['hidden_norms']", "True True"]
    assert namespace["normalized"].shape == (128, 32)
