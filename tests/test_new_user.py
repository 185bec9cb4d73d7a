"""What a new user hit after the demo: a job file's sibling imports, the end of a run, the demo's validation
cadence, docs citing a file the repo does not have. Each test reproduces the finding first."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from conftest import TINY

from lenscope.cli.main import main
from lenscope.config import hydrate
from lenscope.examples.grokking import GrokConfig
from lenscope.job_registry import resolve
from lenscope.store import Store

REPO = Path(__file__).resolve().parent.parent


def test_a_job_file_imports_its_siblings_as_python_file_py_would(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "sibling_helpers_xyz.py").write_text("WIDTH = 7\n")
    (folder / "sibling_job.py").write_text(
        "from sibling_helpers_xyz import WIDTH\n"
        "from lenscope.examples.grokking import GrokTrainer\n\n\n"
        "class Wide(GrokTrainer):\n    \"\"\"Uses a sibling module.\"\"\"\n    SIBLING = WIDTH\n")
    assert resolve(f"{folder / 'sibling_job.py'}:Wide").SIBLING == 7  # was: ModuleNotFoundError


def test_a_run_ends_with_where_the_results_are_and_what_to_run_next(tmp_path: Path, capsys) -> None:
    store = tmp_path / "runs"
    sources = [*TINY, "training/steps=40", "logging/validation_interval=10", "logging/analysis_interval=20",
               f"logging/results={tmp_path / 'results'}"]
    assert main(["--store", str(store), "run", "grokking/train", *sources]) == 0
    captured = capsys.readouterr()
    last = captured.out.strip().splitlines()[-1]
    assert last.startswith("node grokking.train@")  # scripts still take the node from the last line
    node = last.split()[1]
    nonce = node.split("@")[1].split(":")[0]
    said = captured.err
    assert f"results  {tmp_path / 'results' / 'grokking.train' / nonce}/<step>/" in said
    assert f"lenscope --store {store} show {node}" in said and f"lenscope --store {store} ui" in said
    with Store(store) as opened:  # validation every 10 steps, the tandem analyses only every 20
        rows = opened.query().nonce(nonce).where("val/accuracy", ">=", 0).select(["val/accuracy"])
        assert [r["seq"] for r in rows] == [10, 20, 30, 40]
        figures = opened.query().nonce(nonce).artifact("fourier").select()
        assert [r["seq"] for r in figures] == [20, 40]


def test_make_demo_validates_often_enough_to_show_the_grokking_delay() -> None:
    makefile = (REPO / "Makefile").read_text()
    command = re.search(r"^demo:.*\n(?:#.*\n)*\t(.+)$", makefile, re.M).group(1)
    words = shlex.split(command)
    assert words[:3] == ["$(BIN)/lenscope", "run", "grokking/train"]
    config = hydrate(GrokConfig, *words[3:])
    # Finding: every 500 steps gave 4 points; val accuracy is 0.23 at step 150 and 0.77 at 500.
    assert config.validation_interval <= 50 and config.steps // config.validation_interval >= 40
    assert config.analysis_interval == 500  # the figures keep their cadence, so the demo stays quick


def test_docs_cite_only_files_the_repo_has() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    cited = {(page.name, name) for page in pages for name in re.findall(r"\b([A-Z][A-Z_]+\.md)\b", page.read_text())}
    missing = [(page, name) for page, name in cited if not any((REPO / d / name).exists() for d in (".", "docs"))]
    assert not missing  # was: DESIGN.md, cited by docs/analysis.md and docs/store.md
