"""A sweep worker killed mid-trial loses nothing: its trial is failed once its heartbeat stops, queued again with the
same params, and a worker that joins finishes the budget with every trial complete (E1)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from xor_job import XOR_JOB

from lenscope.store import Store
from lenscope.sweeps import SweepSpec, create, load
from lenscope.sweeps.study import _retry_callback

optuna = pytest.importorskip("optuna", reason="sweeps need Optuna: pip install -e '.[sweep]'")
pytestmark = pytest.mark.slow

SOURCES = ["training/steps=20", "logging/validation_interval=10", "logging/checkpoint_interval=0",
           "training/analyze=false"]

# From a worker process's second trial on, each batch sleeps first ($SLOW_XOR_S): the first worker's trial 0 runs at
# full speed, its trial 1 for 20 s or more however loaded the machine, so the poll below cannot miss it and the
# worker is killed inside it, not between trials. (The job module is imported once per process.)
SLOW = '''

import os as _os
import time as _time


class SlowXor(Xor):
    started = 0

    def on_train_start(self):
        SlowXor.started += 1
        return super().on_train_start()

    def batch(self, split, index=0):
        if SlowXor.started > 1:
            _time.sleep(float(_os.environ.get("SLOW_XOR_S", "0")))
        return super().batch(split, index)
'''


def _wait_for(predicate, what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_a_killed_workers_trial_is_failed_and_run_again(tmp_path: Path) -> None:
    (tmp_path / "xor.py").write_text(XOR_JOB + SLOW)
    root = tmp_path / "runs"
    spec = SweepSpec(job=f"{tmp_path / 'xor.py'}:SlowXor", sources=SOURCES, params=["optimization/lr=uniform:0.01:0.1"],
                     objective="val/loss:min", sampler="random", pruner="none", trials=2)
    with Store(root) as store:
        create(store, spec, "s")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "LENSCOPE_SWEEP_HEARTBEAT_S": "1"}  # a dead trial found in 3 s
    command = [sys.executable, "-m", "lenscope", "sweep", "--join", "s", "--store", str(root)]

    def states() -> dict[int, str]:
        with Store(root) as store:
            return {t.number: t.state.name for t in load(store, "s")[0].trials}

    first = subprocess.Popen(command, env={**env, "SLOW_XOR_S": "1"}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: states().get(0) == "COMPLETE" and states().get(1) == "RUNNING", "trial 1 to begin")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    assert states()[1] == "RUNNING"                                    # the dead worker's trial, stuck as it was
    joined = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert joined.returncode == 0, joined.stderr[-2000:]
    with Store(root) as store:
        study, _ = load(store, "s")
        trials = {t.number: t for t in study.trials}
    complete = [t for t in trials.values() if t.state.name == "COMPLETE"]
    assert trials[1].state.name == "FAIL" and len(complete) == 2       # the budget: 2 complete, the lost one again
    retried_from = _retry_callback(optuna).retried_trial_number
    retried = [t for t in complete if retried_from(t) == 1]
    assert len(retried) == 1 and retried[0].params == trials[1].params


@pytest.mark.parametrize("given", ["0", "soon", "-3"])
def test_a_bad_heartbeat_period_is_refused_by_name(given: str, monkeypatch) -> None:
    from lenscope.errors import UsageError
    from lenscope.sweeps.study import heartbeat_s

    monkeypatch.setenv("LENSCOPE_SWEEP_HEARTBEAT_S", given)
    with pytest.raises(UsageError, match=r"\$LENSCOPE_SWEEP_HEARTBEAT_S=.*expected a number of seconds"):
        heartbeat_s()
