"""Ctrl-C and SIGTERM during `lenscope run`, with real subprocesses and signals.

A run stops within seconds, exits 130, marks its last node failed with `interrupted` (and only a node it
owns), leaves every results file with its artifact and every artifact with its file, never prints
'database is locked', and says the exact command that resumes it.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import TINY, lenscope_cmd

from lenscope.examples.grokking import GrokTrainer
from lenscope.store import Node, Store
from lenscope.training.resume import resume_point

JOBS = Path(__file__).parent / "jobs" / "slow_grok.py"
# tandem analyses at every 5th step keep the publisher busy; checkpoints every 10 steps
TRAIN = TINY + ["training/steps=2000", "logging/validation_interval=5", "logging/checkpoint_interval=10"]
BOUND_S = 30.0  # generous: a loaded CI machine; the run itself stops at the next safe point

pytestmark = pytest.mark.slow  # real processes interrupted and waited for


def _interrupt(command: list[str], signum: int, marker: str, count: int, delay: float) -> tuple[int, str, float]:
    """Start `command`, wait for the `count`-th stderr line containing `marker`, wait `delay`, send `signum`.

    Returns (exit code, stderr, seconds from the signal to the exit).
    """
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen, lines = 0, []
    try:
        for line in proc.stderr:
            lines.append(line)
            seen += marker in line
            if seen == count:
                break
        assert proc.poll() is None, "".join(lines)
        time.sleep(delay)
        sent = time.monotonic()
        proc.send_signal(signum)
        _, rest = proc.communicate(timeout=BOUND_S + 60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, "".join(lines) + rest, took


def _files_and_artifacts(store: Store, results: Path) -> tuple[dict, dict]:
    """{(node address, filename): bytes} of the results folder and of the stored artifacts (every version)."""
    files = {}
    for path in results.rglob("*"):
        if path.is_file():
            seq, nonce, name = path.parent.name, path.parent.parent.name, path.parent.parent.parent.name
            files[(f"{name}@{nonce}:{seq}", path.name)] = path.read_bytes()
    rows = store.query().artifact().history().select()
    return files, {(row["node"], row["filename"]): row["payload"].content for row in rows}


@pytest.mark.parametrize(("signum", "count", "delay"), [(signal.SIGINT, 1, 0.0), (signal.SIGTERM, 3, 0.4)],
                         ids=["sigint-at-first-validation", "sigterm-while-publishing"])
def test_interrupted_training_stops_marks_failed_and_says_how_to_resume(tmp_path, signum, count, delay):
    root, results = tmp_path / "runs", tmp_path / "results"
    sources = [*TRAIN, f"logging/results={results}"]
    code, err, took = _interrupt(lenscope_cmd("run", "grokking/train", *sources, "--store", str(root)),
                                 signum, "val_loss", count, delay)
    assert code == 130, err
    assert took < BOUND_S, err
    assert "database is locked" not in err and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    with Store(root) as store:
        (failed,) = store.query().where("status", "==", "failed").all()
        assert store.query().where("status", "==", "running").count() == 0
        assert store.get(failed).error == "interrupted"
        assert failed.seq == max(n.seq for n in store.query().all())
        files, artifacts = _files_and_artifacts(store, results)
        assert files == artifacts and artifacts  # each file with its artifact (same bytes), each artifact with its file
        checkpointed = store.query().nonce(failed.nonce).checkpoint().count() > 0
        point = resume_point(GrokTrainer, sources, store) if checkpointed else None
    said = f"lenscope: interrupted by {signal.Signals(signum).name}; node {failed} marked failed (interrupted); "
    if not checkpointed:  # stopped before step 10 had its checkpoint
        assert count == 1 and last == said + "it wrote no checkpoint: run it again to start over"
        return
    resume = shlex.join(["lenscope", "run", "grokking/train", *sources, "--resume", "--store", str(root)])
    assert last == said + f"resume it with: {resume}"
    assert point.head.node == failed and point.checkpoint.lineage == failed.lineage and point.checkpoint.seq >= 10


@pytest.fixture(scope="module")
def checkpointed(trained_base) -> tuple[Path, Node]:
    """A store with a finished 20-step run (checkpoint at 20): this module's copy of the worker's trained base."""
    return trained_base.root, trained_base.node


@pytest.mark.parametrize("on_base", [True, False], ids=["on-a-checkpoint", "on-fresh-weights"])
def test_interrupted_analysis_marks_only_a_node_it_owns(checkpointed, on_base):
    root, base = checkpointed
    results = root / f"results-{on_base}"
    where = ["--base", str(base)] if on_base else []
    code, err, took = _interrupt(lenscope_cmd("run", f"{JOBS}:SlowPlot", *TINY, f"logging/results={results}", *where,
                                              "--store", str(root / "runs")), signal.SIGINT, "plotting", 1, 0.0)
    assert code == 130 and took < BOUND_S, err
    last = err.strip().splitlines()[-1]
    with Store(root / "runs") as store:
        assert store.query().artifact("slowplot").count() == 0 and not results.exists()
        if on_base:  # the analysis attached to the node without owning it: nothing to mark, nothing said
            assert last == "lenscope: interrupted by SIGINT"
            assert store.get(base).status == "done" and store.get(base).error is None
        else:
            (made,) = store.query().where("status", "==", "failed").all()
            assert last == f"lenscope: interrupted by SIGINT; node {made} marked failed (interrupted)"
            assert store.get(made).error == "interrupted"
