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


def test_a_names_filter_whose_globs_match_nothing_says_so(tmp_path: Path) -> None:
    import pytest

    import lenscope.ops
    from lenscope.analysis.cfg import UnmatchedFilter
    from lenscope.examples.grokking import GrokTrainer

    trainer = GrokTrainer([*TINY, f"logging/results={tmp_path / 'results'}"], store=tmp_path / "runs")
    globs = ["embed", "embd", "blocks_9/*", "unembedding", "mlp"]
    with pytest.warns(UnmatchedFilter, match=r"4 of 5 globs match no discovered path.*'embd' \(did you mean "
                                             r"embed"):
        stats = lenscope.ops.activation_stats(trainer, names_filter=globs)
    assert list(stats) == ["embed"]  # was: this, without a word about the other four


def test_lenscope_plots_imports_and_heatmap_ticks_sit_on_cells() -> None:
    import importlib

    import numpy as np

    plots = importlib.import_module("lenscope.plots")  # was: ModuleNotFoundError, though the docs name it
    assert plots.heatmap is importlib.import_module("lenscope.analysis.plots").heatmap
    figure = plots.heatmap(np.arange(12.0).reshape(4, 3))
    axes = figure.axes[0]

    def shown(ticks, limits):
        return [float(t) for t in ticks if min(limits) <= t <= max(limits)]

    assert shown(axes.get_xticks(), axes.get_xlim()) == [0.0, 1.0, 2.0]  # was: -0.5, 0, 0.5, ...
    assert shown(axes.get_yticks(), axes.get_ylim()) == [0.0, 1.0, 2.0, 3.0]
    import matplotlib.pyplot as plt

    plt.close(figure)
