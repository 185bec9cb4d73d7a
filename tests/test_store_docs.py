"""docs/store.md stays runnable: its Python examples run, in order, against a fresh store."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).parents[1] / "docs" / "store.md"


def test_store_docs_examples_run(tmp_path, capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 3
    code = "\n".join(blocks).replace('"/tmp/lenscope-demo"', repr(str(tmp_path / "demo")))
    namespace: dict = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    out = capsys.readouterr().out
    assert "{'train/loss': 1.5, 'train/acc': 0.1}" in out and "done running" in out
    rows = namespace["q"].name("grokking/train").where("train/loss", "<", 2.0).select()
    assert [r["seq"] for r in rows] == [0] and rows[0]["status"] == "done"
    namespace["store"].close()
