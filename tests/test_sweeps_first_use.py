"""Sweep workers started together on a fresh store: Optuna's tables are created once, under a lock, and every worker
gets its study (SQLite file and a fresh PostgreSQL database); creating a study loads no JAX."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pg_server import postgres_server, postgres_url  # noqa: F401

from lenscope.store import Store
from lenscope.sweeps import load

pytest.importorskip("optuna", reason="sweeps need Optuna: pip install -e '.[sweep]'")

WORKER = """
import pathlib, sys, time
from lenscope.store import Store
from lenscope.sweeps import SweepSpec, create
url, go, name = sys.argv[1:4]
pathlib.Path(f"{go}.ready.{name}").touch()  # lenscope imported: waiting on the go-file
while not pathlib.Path(go).exists():
    time.sleep(0.005)
with Store(url) as store:
    create(store, SweepSpec(job="grokking/train", params=["optimization/lr=uniform:0.001:0.01"]), name)
assert "jax" not in sys.modules, "creating a study imported JAX (lenscope.sweeps loads run.py on first use)"
print("made", name)
"""
WORKERS = 4


def _start_together(url: str, tmp_path: Path) -> list[subprocess.CompletedProcess[str]]:
    """WORKERS processes that each open the store and create a study the moment a go-file appears."""
    go = tmp_path / "go"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, url, str(go), f"s{i}"], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(WORKERS)]
    deadline = time.monotonic() + 120
    while not all(Path(f"{go}.ready.s{i}").exists() for i in range(WORKERS)):  # every interpreter is waiting
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "workers failed to start"
        time.sleep(0.02)
    go.touch()
    return [subprocess.CompletedProcess(p.args, p.wait(timeout=180), *p.communicate()) for p in procs]


def _check(url: str, done: list[subprocess.CompletedProcess[str]]) -> None:
    assert [d.returncode for d in done] == [0] * WORKERS, [d.stderr[-1500:] for d in done]
    with Store(url) as store:
        for i in range(WORKERS):
            study, spec = load(store, f"s{i}")
            assert spec.job == "grokking/train" and study.study_name == f"s{i}"


def test_workers_started_together_on_a_fresh_sqlite_store(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _check(str(root), _start_together(str(root), tmp_path))
    assert (root / "optuna.db").exists()


def test_workers_started_together_on_a_fresh_postgresql_database(tmp_path: Path, postgres_url: str) -> None:
    url = f"{postgres_url}?root={tmp_path / 'blobs'}"
    _check(url, _start_together(url, tmp_path))
