"""`lenscope fsck --repair` repairs the node a killed sweep worker left `running`, on SQLite and PostgreSQL, after a
worker that joins has finished the budget: the trial's run node is marked failed (stale: its job's process gone),
and a second fsck finds nothing left to repair."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pg_server import postgres_server  # noqa: F401
from sqlalchemy import select
from test_sweeps_dead_worker import SLOW, SOURCES, _wait_for
from ui_fixtures import store_url
from xor_job import XOR_JOB

from lenscope.store import Node, Store
from lenscope.store.schema import nodes
from lenscope.sweeps import SweepSpec, create, load

optuna = pytest.importorskip("optuna", reason="sweeps need Optuna: pip install -e '.[sweep]'")
pytestmark = pytest.mark.slow


def _running(root: str) -> list[str]:
    """The addresses of the store's nodes marked running."""
    with Store(root) as store, store.read() as connection:
        rows = connection.execute(select(nodes.c.name, nodes.c.nonce, nodes.c.seq).where(nodes.c.status == "running"))
        return [f"{r.name}@{r.nonce}:{r.seq}" for r in rows]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_fsck_repairs_the_running_node_of_a_killed_sweep_worker(tmp_path: Path, kind: str, request) -> None:
    (tmp_path / "xor.py").write_text(XOR_JOB + SLOW)
    root = store_url(kind, tmp_path, request.getfixturevalue("postgres_server") if kind == "postgresql" else None)
    spec = SweepSpec(job=f"{tmp_path / 'xor.py'}:SlowXor", sources=SOURCES, params=["optimization/lr=uniform:0.01:0.1"],
                     objective="val/loss:min", sampler="random", pruner="none", trials=2)
    with Store(root) as store:
        create(store, spec, "s")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "LENSCOPE_SWEEP_HEARTBEAT_S": "1", "SLOW_XOR_S": "1"}
    command = [sys.executable, "-m", "lenscope", "sweep", "--join", "s", "--store", str(root)]

    def trial_running() -> bool:
        with Store(root) as store:
            trials = {t.number: t.state.name for t in load(store, "s")[0].trials}
        return trials.get(1) == "RUNNING" and len(_running(root)) == 1

    worker = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(trial_running, "trial 1's run to begin")
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
    [stuck] = _running(root)
    joined = subprocess.run(command, env={**env, "SLOW_XOR_S": "0"}, capture_output=True, text=True, timeout=300)
    assert joined.returncode == 0, joined.stderr[-2000:]  # the budget finished by a worker that joins
    fsck = [sys.executable, "-m", "lenscope", "fsck", "--store", str(root)]
    found = subprocess.run(fsck, env=env, capture_output=True, text=True, timeout=120)
    assert stuck in found.stdout, found.stdout
    repaired = subprocess.run([*fsck, "--repair"], env=env, capture_output=True, text=True, timeout=120)
    print(found.stdout, repaired.stdout, repaired.stderr)
    assert _running(root) == [], repaired.stdout
    with Store(root) as store:
        node = Node.parse(stuck)
        assert store.status(node) == "failed"
    again = subprocess.run(fsck, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and stuck not in again.stdout, again.stdout
