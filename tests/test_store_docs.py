"""docs/store.md stays runnable: its Python examples run, in order, against a fresh store."""

from __future__ import annotations

from doc_blocks import DOCS, run_doc


def test_store_docs_examples_run(tmp_path, capsys):
    namespace = run_doc(DOCS / "store.md", {'"/tmp/lenscope-demo"': repr(str(tmp_path / "demo"))}, min_blocks=3)
    out = capsys.readouterr().out
    assert "{'train/loss': 1.5, 'train/acc': 0.1}" in out and "done running" in out
    rows = namespace["q"].name("grokking/train").where("train/loss", "<", 2.0).select()
    assert [r["seq"] for r in rows] == [0] and rows[0]["status"] == "done"
    namespace["store"].close()
