"""Several real processes writing one store at once, and a writer killed with SIGKILL mid-run (S8)."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from pg_server import postgres_server, postgres_url  # noqa: F401
from store_fixtures import backend, store, store_url, worker_content  # noqa: F401

from lenscope.store import Store

FIXTURES = str(Path(__file__).with_name("store_fixtures.py"))
WORKERS, WRITES = 4, 100


def test_four_processes_lose_and_duplicate_nothing(store, store_url, tmp_path):
    node = store.new_node("shared")
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, FIXTURES, "write", store_url, node.address, str(w), str(WRITES), str(go)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for w in range(WORKERS)
    ]
    deadline = time.monotonic() + 120
    while not all(Path(f"{go}.ready{w}").exists() for w in range(WORKERS)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "workers failed to start"
        time.sleep(0.05)
    go.touch()  # every worker starts writing at once
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()

    history = store.artifact_history(node, "shared")
    assert [version for version, _ in history] == list(range(1, WORKERS * WRITES + 1))
    expected = {f"w{w}_{i}.bin": worker_content(w, i) for w in range(WORKERS) for i in range(WRITES)}
    got = {payload.filename: payload.content for _, payload in history}
    assert len(got) == len(history) == len(expected) and got == expected

    shared = [value for _, value in store.value_history(node, "shared")]
    assert sorted(shared) == sorted(f"{w}:{i}" for w in range(WORKERS) for i in range(WRITES))
    for w in range(WORKERS):
        mine = [value for _, value in store.value_history(node, f"w{w}")]
        assert mine == list(range(WRITES))  # each worker's own writes land in its order
    folded = {k: v for k, v in store.values(node).items() if k != "shared"}
    assert folded == {f"w{w}": WRITES - 1 for w in range(WORKERS)}
    assert store.query().node(node).artifact().history().count() == WORKERS * WRITES


def _run_and_kill(url: str, node: str, after: int) -> list[int]:
    """Start a writer, SIGKILL it once it reported `after` commits; return every index it reported."""
    proc = subprocess.Popen([sys.executable, FIXTURES, "killable", url, node],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reported: list[int] = []
    for line in proc.stdout:
        reported.append(int(line))
        if len(reported) >= after:
            proc.send_signal(signal.SIGKILL)
            break
    # the lines the iteration read ahead into its buffer, then the pipe to its end (communicate() would read only
    # the pipe, and a reported index left in the buffer would look like a write committed unreported)
    reported += [int(line) for line in proc.stdout.read().split()]
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, err
    return reported


def test_sigkilled_writer_keeps_every_committed_write(store, store_url, backend):
    node = store.new_node("killed")
    reported = _run_and_kill(store_url, node.address, after=25)
    assert reported == list(range(len(reported)))

    with Store(store_url) as reader:
        history = reader.artifact_history(node, "k")
        indices = [int(payload.filename[1:-4]) for _, payload in history]
        # Every reported write is there; at most the one in flight at the kill got committed unreported.
        assert indices[: len(reported)] == reported
        assert len(indices) - len(reported) in (0, 1)
        for index, (_, payload) in zip(indices, history):
            assert payload.content == worker_content(7, index, size=64_000)
        values = reader.values(node)
        assert all(values[f"k/{i}"] == i for i in reported)
        assert set(values) <= {f"k/{i}" for i in indices}

        # The store still takes writes after the crash, continuing the version sequence.
        assert reader.put_artifact(node, "k", "after.bin", b"after") == len(indices) + 1

    if backend == "sqlite":
        raw = sqlite3.connect(Path(store.root) / "lenscope.db")
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        raw.close()
