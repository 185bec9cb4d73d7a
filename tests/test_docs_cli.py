"""docs/cli.md stays true: its `bash` blocks run, in order, in one shell against a fresh store (its `lenscope` calls
served in this process: tests/doc_shell.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from doc_shell import bash_blocks, run_blocks

from lenscope.store import Node, Store

DOC = Path(__file__).parents[1] / "docs" / "cli.md"


def test_doc_has_runnable_examples_of_every_subcommand():
    code = "\n".join(bash_blocks(DOC))
    for command in ("run", "configure", "jobs", "ls", "show", "get"):
        assert re.search(rf"^(?:\S+=\$\()?lenscope {command}\b", code, re.M), command


@pytest.mark.slow
def test_doc_examples_run(tmp_path):
    done = run_blocks(DOC, tmp_path)
    out = done.stdout
    assert done.returncode == 0, (out, done.stderr[-3000:])
    assert "round trip: identical" in out and "n_layers: 2" in out
    assert "summary is valid JSON" in out and out.rstrip().endswith("exit code 2")
    node = Node.parse(re.search(r"^trained: (\S+)$", out, re.M)[1])
    more, fork = (Node.parse(a) for a in re.search(r"^resumed: (\S+)  branched: (\S+)$", out, re.M).groups())
    assert (node.seq, more.seq, fork.seq) == (20, 30, 5)
    assert more.nonce == node.nonce != fork.nonce
    with Store(tmp_path / "runs", readonly=True) as store:
        assert store.parents(Node(fork.name, fork.nonce, 0)) == [node]
        assert (tmp_path / "summary.json").read_bytes() == store.artifact(node, "summary").content
        assert (tmp_path / "fourier.pdf").read_bytes() == store.artifact(node, "fourier").content
        record = store.get(node)
    shown = json.loads((tmp_path / "node.json").read_text())
    assert shown["node"] == str(node) and shown["values"] == record.values
    assert [r["node"] for r in json.loads((tmp_path / "summaries.json").read_text())] == [str(node)]
