"""docs/experiments.md stays true: its `bash` blocks (a sweep, config queries, diff, exports) run in one shell (its
`lenscope` calls served in this process: tests/doc_shell.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doc_shell import run_blocks

DOC = Path(__file__).parents[1] / "docs" / "experiments.md"

pytest.importorskip("optuna", reason="docs/experiments.md needs optuna: pip install -e '.[sweep]'")
pytest.importorskip("tensorboard", reason="docs/experiments.md needs tensorboard: pip install -e '.[export]'")
pytest.importorskip("mlflow", reason="docs/experiments.md needs mlflow: pip install -e '.[export]'")


@pytest.mark.slow  # a whole document: an Optuna sweep, diff and exports
def test_doc_examples_run(tmp_path: Path) -> None:
    done = run_blocks(DOC, tmp_path)
    out = done.stdout
    assert done.returncode == 0, (out, done.stderr[-3000:])
    (tmp_path / "out.txt").write_text(out)
    lines = out.splitlines()
    assert lines[0] == "study wd" and lines[1].startswith("best trial ") and lines[2].startswith("node ")
    best = lines[2].split()[1]
    table = [line.split() for line in lines if line.startswith("grokking.train@") and "complete" in line]
    assert sorted(row[2] for row in table) == ["0", "1"] and sorted(row[5] for row in table) == ["0.1", "2"]
    assert re.search(r"^  config/optimization/weight_decay\s+(0\.1\s+2|2\s+0\.1)$", out, re.M)  # diff: what differs
    assert not re.search(r"^  config/optimization/lr", out, re.M)  # the same in both: not listed
    assert f"{best} -> tb/{best.rsplit(':', 1)[0]}" in out
    assert re.search(rf"^{re.escape(best.rsplit(':', 1)[0])} (0\.1|2) 4$", out, re.M)  # 4 validations in MLflow
    assert list((tmp_path / "tb" / best.rsplit(":", 1)[0]).glob("events.out.tfevents.*"))
    analysed = re.search(r"^analysed: (\S+):40$", out, re.M)[1]
    shares = re.findall(rf"^{re.escape(analysed)}:(\d+)\s+done\s+(\d\.\d+)\s+\S+$", out, re.M)
    assert [seq for seq, _ in shares] == ["20", "40"]  # analysis/summary/topk_share as values at each analysis
    assert re.search(r"summary\.json \(\d+ bytes\)  by lenscope\.examples\.grokking_analyses\.SummaryAnalysis \(/.*"
                     r"grokking_analyses\.py, [0-9a-f]{12}, lenscope ", out)
