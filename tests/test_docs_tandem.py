"""docs/tandem.md stays runnable: its Python blocks run in order in a temporary folder."""

from __future__ import annotations

import json

from doc_blocks import DOCS, python_blocks, run_doc

DOC = DOCS / "tandem.md"


def test_tandem_docs_examples_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert len(python_blocks(DOC)) == 6
    namespace = run_doc(DOC)
    out = capsys.readouterr().out
    assert "Unready.CONFIG lacks 'analysis/rows', read by tandem analysis EmbeddingNorms" in out
    assert "[10, 20, 30, 40]" in out and "['norms', 'summary']" in out
    assert "True True\n(8,)\n" in out and "borrowed view of WatchedTrainer: it cannot tick" in out
    assert out.rstrip().endswith("\n0")
    node, store = namespace["node"], namespace["store"]
    assert node.seq == 40 and node.name.endswith("WatchedTrainer")
    norms = store.query().nonce(node.nonce).artifact("norms").sort("seq").select()
    assert [json.loads(r["payload"].content)["seq"] for r in norms] == [10, 20, 30, 40]
    saved = tmp_path / "tandem-results" / node.name / node.nonce / "40" / "norms.json"
    assert saved.read_bytes() == norms[-1]["payload"].content
    assert not (tmp_path / "runs").exists()  # the rejected declaration wrote nothing
    store.close()
