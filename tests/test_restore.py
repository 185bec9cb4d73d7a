"""Restoring a checkpoint is strict unless surgery says otherwise: a foreign checkpoint is one clear error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_cli
from tests.xor_job import XOR_JOB

from lenscope.errors import CheckpointError
from lenscope.runner import run_job
from lenscope.store import Store
from lenscope.training.checkpoint import partial_restore, restore_tree

TARGET = {"params": {"embed": np.zeros((4, 3), np.float32), "head": np.zeros((3,), np.float32)}}


def test_a_matching_checkpoint_restores_every_leaf():
    saved = {"params": {"embed": np.ones((4, 3), np.float32), "head": np.full((3,), 2, np.float32)}}
    restored, missing = restore_tree(TARGET, saved)
    assert missing == [] and restored["params"]["head"].tolist() == [2, 2, 2]


@pytest.mark.parametrize("saved, message", [
    ({"params": {"embed": np.ones((4, 3), np.float32)}}, "the checkpoint lacks 1 leaves of the model: 'params/head'"),
    ({"params": {**TARGET["params"], "extra": np.ones(2, np.float32)}},
     "it has 1 leaves the model lacks: 'params/extra'"),
    ({"params": {"embed": np.ones((4, 5), np.float32), "head": np.ones(3, np.float32)}},
     "leaf 'params/embed' has shape (4, 5) dtype float32, the model expects shape (4, 3) dtype float32"),
    ({"params": {"embed": np.ones((4, 3), np.float64), "head": np.ones(3, np.float32)}}, "dtype float64"),
])
def test_a_mismatched_checkpoint_is_one_error_naming_the_first_mismatches(saved, message):
    with pytest.raises(CheckpointError, match="checkpoint does not match the model") as caught:
        restore_tree(TARGET, saved)
    assert message in str(caught.value) and "override surgery()" in str(caught.value)


def test_partial_restore_is_the_explicit_opt_in():
    restored, missing = partial_restore(TARGET, {"params": {"embed": np.ones((4, 3), np.float32), "x": np.ones(1)}})
    assert missing == ["params/head"] and restored["params"]["embed"].sum() == 12
    restored, missing = restore_tree(TARGET, {"params": {"embed": np.ones((4, 3), np.float32)}},
                                     may_miss=lambda path: path.startswith("params/head"))
    assert missing == ["params/head"]




def test_an_analysis_on_a_foreign_checkpoint_fails_before_anything_is_written(tmp_path: Path):
    (tmp_path / "xor.py").write_text(XOR_JOB)
    store_root = tmp_path / "runs"
    node = run_job(f"{tmp_path / 'xor.py'}:Xor", [f"logging/results={tmp_path / 'results'}"], store=store_root)
    before = Store(store_root).get(node)
    done = run_cli("run", "grokking/fourier", "--base", str(node), "--store", str(store_root),
                   f"logging/results={tmp_path / 'analysis'}", cwd=tmp_path)  # in this process: tests/cli_runner.py
    assert done.rc == 2, done.err
    assert "checkpoint does not match the model" in done.err and "lacks" in done.err
    assert len(done.err.strip().splitlines()) == 1, done.err
    after = Store(store_root).get(node)
    assert after.artifacts == before.artifacts and after.values == before.values
    assert Store(store_root).status(node) == "done"
    assert not (tmp_path / "analysis").exists()
