"""docs/analysis.md stays runnable: its Python examples run, in order, against a fresh store and results folder."""

from __future__ import annotations

from doc_blocks import DOCS, run_doc

from lenscope.store import Store


def test_analysis_docs_examples_run(tmp_path, capsys):
    root = tmp_path / "demo"
    namespace = run_doc(DOCS / "analysis.md", {'"/tmp/lenscope-analysis-demo"': repr(str(root))}, min_blocks=5)
    out = capsys.readouterr().out
    assert "demo.embed_norms 0" in out and "embed_norms.json" in out and "['blocks_0/attn']" in out
    assert "['context', 'keyed', 'mask', 'return_pattern', 'x']" in out
    assert "(['hidden'], False)\n(8,)\n1\n" in out  # the Capturer on a bare linen model
    trained = namespace["trained"]
    store = Store(root / "runs")
    assert sorted(store.get(trained).artifacts) == ["embed_norms", "mean_attention"]
    assert store.get(trained).artifacts["mean_attention"].content.startswith(b"%PDF")
    assert store.status(trained) == "done" and store.children(trained) == []
    assert (root / "results" / trained.name / trained.nonce / "20" / "mean_attention.pdf").is_file()
