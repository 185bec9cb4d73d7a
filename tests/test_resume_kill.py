"""Kill -9 a training subprocess after a checkpoint; resuming reaches the uninterrupted run's parameters bitwise."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
from conftest import lenscope_cmd

from lenscope.examples.grokking import GrokTrainer
from lenscope.runner import run_job
from lenscope.store import Store
from lenscope.training.checkpoint import read_checkpoint
from lenscope.training.state import flat_paths

JOB = str(Path(__file__).parent / "jobs" / "slow_grok.py") + ":SlowGrok"


def _wait_for_checkpoint(store_root: Path, proc: subprocess.Popen, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "training finished before it could be killed"
        if (store_root / "lenscope.db").exists():
            with Store(store_root) as store:
                marked = store.query().checkpoint().sort("seq").all()
            if marked:
                return marked[-1]
        time.sleep(0.05)
    raise AssertionError("no checkpoint was marked in time")


def test_kill_after_checkpoint_then_resume_matches_uninterrupted_run(tiny, store_root, tmp_path):
    config = tiny + ["training/steps=200", "logging/checkpoint_interval=50", "logging/validation_interval=100"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(lenscope_cmd("run", JOB, *config, "--store", str(store_root)), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        checkpoint_node = _wait_for_checkpoint(store_root, proc)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert checkpoint_node.seq in (50, 100, 150)

    command = lenscope_cmd("run", JOB, *config, "--base", str(checkpoint_node), "--store", str(store_root))
    resumed = subprocess.run(command,
                             capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    final = resumed.stdout.strip().splitlines()[-1]
    assert final == f"node {checkpoint_node.name}@{checkpoint_node.nonce}:200"

    reference = run_job(GrokTrainer, config, store=tmp_path / "reference")
    with Store(store_root) as store, Store(tmp_path / "reference") as ref_store:
        ours = read_checkpoint(store.checkpoint(final.split()[1]))
        theirs = read_checkpoint(ref_store.checkpoint(reference))
        assert store.status(final.split()[1]) == "done"
        lineage = store.query().nonce(checkpoint_node.nonce).sort("seq").all()
    assert [n.seq for n in lineage] == list(range(201))
    assert int(ours["step"]) == int(theirs["step"]) == 200
    a, b = flat_paths(ours), flat_paths(theirs)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), err_msg=key)
