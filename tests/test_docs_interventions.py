"""docs/interventions.md stays runnable: its Python blocks run in order in a temporary folder."""

from __future__ import annotations

from doc_blocks import DOCS, run_doc


def test_interventions_docs_examples_run(tmp_path, capsys):
    namespace = run_doc(DOCS / "interventions.md", {"/tmp/lenscope-interventions-demo": str(tmp_path)}, min_blocks=3)
    out = capsys.readouterr().out
    assert "['base', 'grid', 'knocked', 'saliency'] (1, 3) (3,)\n1\n" in out
    assert "(158, 3, 23) False" in out and "(6, 3) (2, 2)" in out and out.count("(2, 3) True") == 2
    assert "['blocks_0/attn', 'blocks_0/mlp', 'blocks_1/attn', 'blocks_1/mlp'] " \
           "['blocks_0/attn/out', 'blocks_1/attn/out']" in out
    assert out.rstrip().endswith("(3,)")
    namespace["store"].close()
