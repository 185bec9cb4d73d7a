"""Shared store-test fixtures (one store per backend) and the writer processes the concurrency tests start.

Import fixtures explicitly: `from store_fixtures import backend, store, store_url  # noqa: F401`
(together with `from pg_server import postgres_server, postgres_url`). Run as a script, this file is
a writer process: `python store_fixtures.py write URL NODE WORKER COUNT GO_FILE` or
`python store_fixtures.py killable URL NODE`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from lenscope.store import Store

BACKENDS = ("sqlite", "postgresql")


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    """Each parametrized test runs on SQLite and on a real PostgreSQL server."""
    return request.param


@pytest.fixture
def store_url(backend: str, request, tmp_path: Path) -> str:
    """What to pass to Store(): a folder (SQLite) or a PostgreSQL URL with a root= blob folder."""
    if backend == "sqlite":
        return str(tmp_path / "store")
    url = request.getfixturevalue("postgres_url")
    return f"{url}?root={tmp_path / 'store'}"


@pytest.fixture
def store(store_url: str):
    """An open, empty store on the parametrized backend."""
    with Store(store_url) as opened:
        yield opened


def worker_content(worker: int, index: int, size: int = 300) -> bytes:
    """Distinct binary content for one write, with NUL bytes and a recognizable head."""
    head = f"{worker}:{index}:".encode()
    return head + bytes((worker * 31 + index + k) % 256 for k in range(size))


def _write(url: str, node: str, worker: int, count: int, go_file: str) -> None:
    store = Store(url)
    Path(f"{go_file}.ready{worker}").touch()
    while not Path(go_file).exists():
        time.sleep(0.01)
    for index in range(count):
        store.put_artifact(node, "shared", f"w{worker}_{index}.bin", worker_content(worker, index))
        store.record(node, {"shared": f"{worker}:{index}", f"w{worker}": index})
    store.close()


def _killable(url: str, node: str) -> None:
    store = Store(url)
    index = 0
    while True:
        store.put_artifact(node, "k", f"k{index}.bin", worker_content(7, index, size=64_000))
        store.record(node, {f"k/{index}": index})
        print(index, flush=True)
        index += 1


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "write":
        _write(args[0], args[1], int(args[2]), int(args[3]), args[4])
    elif mode == "killable":
        _killable(args[0], args[1])
    else:
        raise SystemExit(f"unknown mode {mode!r}; expected write or killable")
