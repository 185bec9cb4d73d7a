"""docs/training.md stays runnable: its Python blocks run in order in a temporary folder."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).parents[1] / "docs" / "training.md"


def test_training_docs_examples_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 4
    namespace: dict = {}
    exec(compile("\n".join(blocks), str(DOC), "exec"), namespace)
    out = capsys.readouterr().out
    assert "True 90" in out and "True True" in out
    stopped = namespace["stopped"]
    assert f"True done val/accuracy above 0.6 at step {stopped.seq}" in out and stopped.seq % 10 == 0
    assert namespace["means"]["accuracy"] > 0.5
    assert (tmp_path / "xor-runs" / "lenscope.db").exists()
