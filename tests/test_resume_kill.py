"""Kill -9 a training subprocess after a checkpoint; resuming reaches the uninterrupted run's parameters bitwise.

While the first run lives, its lineage is leased: a second resume is refused and `ls` shows it running;
once it is killed, `ls` shows it stale and a resume (a fresh process) takes it over, on SQLite and PostgreSQL.
The refused run and `ls` run in this process (`lenscope.cli.main`), another process than the leased run's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_cli
from conftest import TINY, lenscope_cmd
from pg_server import postgres_server, postgres_url  # noqa: F401
from store_fixtures import backend, store_url  # noqa: F401

from lenscope.examples.grokking import GrokTrainer
from lenscope.runner import run_job
from lenscope.store import Node, Store
from lenscope.training.checkpoint import read_checkpoint
from lenscope.training.state import flat_paths

pytestmark = pytest.mark.slow  # runs killed and restarted in real processes

JOB = str(Path(__file__).parent / "jobs" / "held_grok.py") + ":HeldGrok"
STEPS = 60
# checkpoints at 20, 40, 60; the first run is held (until killed) before step 36: past its checkpoint at 20
# and its report at 30, short of the next checkpoint
CONFIG = [f"training/steps={STEPS}", "logging/checkpoint_interval=20", "logging/validation_interval=0"]
HELD_AT = 35


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The parameters of the same run, uninterrupted."""
    root = tmp_path_factory.mktemp("reference")
    node = run_job(GrokTrainer, TINY + CONFIG + [f"logging/results={root / 'results'}"], store=root / "runs")
    with Store(root / "runs") as store:
        return flat_paths(read_checkpoint(store.checkpoint(node)))


def _wait_for_checkpoint(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> Node:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "training finished before it could be killed"
        try:
            with Store(url, readonly=True) as store:
                marked = store.query().checkpoint().sort("seq").all()
        except Exception:  # noqa: BLE001  (the store is being created)
            marked = []
        if marked:
            return marked[-1]
        time.sleep(0.05)
    raise AssertionError("no checkpoint was marked in time")


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(lenscope_cmd(*args), capture_output=True, text=True, env=env, timeout=300)


def _status(url: str, node: Node, cwd: Path) -> str:
    listed = run_cli("ls", "--lineage", str(node), "--latest", "--json", "--store", url, cwd=cwd)
    assert listed.rc == 0, listed.err
    return json.loads(listed.out)[0]["status"]


def test_kill_after_checkpoint_then_resume_matches_uninterrupted_run(store_url, backend, tmp_path, reference):
    config = TINY + CONFIG + [f"logging/results={tmp_path / 'results'}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(lenscope_cmd("run", JOB, *config, "--store", store_url),
                            env={**env, "HELD_GROK_AT": str(HELD_AT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        checkpoint_node = _wait_for_checkpoint(store_url, proc)
        refused = run_cli("run", JOB, *config, "--base", str(checkpoint_node), "--store", store_url, cwd=tmp_path)
        assert proc.poll() is None, "the first run ended before the second was refused"
        assert _status(store_url, checkpoint_node, tmp_path) == "running"
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()  # a failed check above: the held run would sleep on
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert refused.rc == 2, refused.err
    lineage = f"{checkpoint_node.name}@{checkpoint_node.nonce}"
    assert f"lineage {lineage} is being run by pid {proc.pid} on " in refused.err
    assert _status(store_url, checkpoint_node, tmp_path) == "stale"

    # SQLite: --resume finds the stale lineage; PostgreSQL: --base on it takes it over too
    how = ["--resume"] if backend == "sqlite" else ["--base", str(checkpoint_node)]
    resumed = _cli("run", JOB, *config, *how, "--store", store_url, env=env)
    assert resumed.returncode == 0, resumed.stderr
    final = resumed.stdout.strip().splitlines()[-1]
    assert checkpoint_node.seq == 20
    assert final == f"node {lineage}:{STEPS}"
    if backend == "sqlite":
        assert f"lenscope: resuming {lineage}:" in resumed.stderr and "(stale: its job died)" in resumed.stderr

    with Store(store_url) as store:
        ours = flat_paths(read_checkpoint(store.checkpoint(final.split()[1])))
        assert store.status(final.split()[1]) == "done"
        nodes = store.query().nonce(checkpoint_node.nonce).sort("seq").all()
        resumed_from = store.query().nonce(checkpoint_node.nonce).checkpoint().sort("seq").all()
    assert [n.seq for n in nodes] == list(range(STEPS + 1)) and resumed_from[-1].seq == STEPS
    assert int(ours["step"]) == int(reference["step"]) == STEPS
    assert ours.keys() == reference.keys()
    for key in ours:
        np.testing.assert_array_equal(np.asarray(ours[key]), np.asarray(reference[key]), err_msg=key)
