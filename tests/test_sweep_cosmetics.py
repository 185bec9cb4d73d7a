"""A 2-point grid sweep as a user sees it: no Optuna ExperimentalWarning on stderr, and its page says
"2 trials of 2", not of the default budget of 10."""

from __future__ import annotations

import warnings

import pytest
from cli_runner import run_cli
from ui_fixtures import ui_client

optuna = pytest.importorskip("optuna")

TINY = """\
data: {p: 23, train_fraction: 0.5}
model: {d_model: 32, n_heads: 2, d_head: 8, d_mlp: 64}
training: {steps: 10, batch_size: 0, analyze: false}
optimization: {lr: 3.0e-3, warmup_steps: 0}
logging: {report_interval: 5, validation_interval: 5, checkpoint_interval: 10}
"""


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    root = tmp_path_factory.mktemp("grid")
    (root / "tiny.yaml").write_text(TINY)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        done = run_cli("--store", str(root / "runs"), "sweep", "grokking/train", "tiny.yaml",
                       "--param", "optimization/weight_decay=choice:0.1,2", "--sampler", "grid",
                       "--objective", "val/accuracy:max", "--study", "wd", cwd=root)
    assert done.rc == 0, done.err
    return root, done, caught


def test_a_sweep_prints_no_optuna_experimental_warning(grid):
    _, done, caught = grid
    experimental = [w for w in caught if issubclass(w.category, optuna.exceptions.ExperimentalWarning)]
    assert not experimental, [str(w.message) for w in experimental]  # was: retried_trial_number, every sweep
    assert "ExperimentalWarning" not in done.err


def test_a_grid_sweep_page_counts_the_grids_points(grid):
    root, _, _ = grid
    client = ui_client(str(root / "runs"))
    try:
        page = next(client).get("/sweep/wd").text
        assert "2 trials of 2 (the grid's points)" in page and "trials of 10" not in page
    finally:
        next(client, None)
