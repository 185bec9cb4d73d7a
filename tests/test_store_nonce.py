"""Two lineages started at the same moment never share a nonce, on SQLite and PostgreSQL.

The nonce source is forced to draw the same nonce in every thread first (the collision the
random draw makes rare), and on PostgreSQL each thread's first INSERT waits at a barrier until
every thread has passed the "is this nonce used?" check, which is exactly the race.
"""

from __future__ import annotations

import threading

import pytest
from pg_server import postgres_server, postgres_url  # noqa: F401
from sqlalchemy import Engine, event
from store_fixtures import backend, store, store_url  # noqa: F401

import lenscope.store.store as store_module
from lenscope.store import Store

THREADS = 3
FORCED = "abcdef"


@pytest.fixture
def colliding_nonces(monkeypatch):
    """Every thread's first nonce draw is FORCED; later draws are random."""
    drawn = threading.local()
    real = store_module.new_nonce

    def draw() -> str:
        if getattr(drawn, "done", False):
            return real()
        drawn.done = True
        return FORCED

    monkeypatch.setattr(store_module, "new_nonce", draw)


@pytest.fixture
def insert_barrier(backend):
    """On PostgreSQL, hold each thread's first node INSERT until all threads reach theirs."""
    if backend != "postgresql":  # SQLite writers are serialized by BEGIN IMMEDIATE: nothing to race
        yield
        return
    barrier = threading.Barrier(THREADS, timeout=30)
    waited = threading.local()

    def hold(conn, cursor, statement, parameters, context, executemany) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO LENSCOPE_NODES") and not getattr(waited, "done", False):
            waited.done = True
            barrier.wait()

    event.listen(Engine, "before_cursor_execute", hold)
    yield
    event.remove(Engine, "before_cursor_execute", hold)


@pytest.mark.parametrize("same_name", [False, True], ids=["names-differ", "same-name"])
def test_concurrent_new_nodes_get_distinct_nonces(store, store_url, colliding_nonces, insert_barrier, same_name):
    made, errors = [], []

    def start(index: int) -> None:
        try:
            with Store(store_url) as mine:
                made.append(mine.new_node("job" if same_name else f"job{index}"))
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert len(made) == THREADS
    assert len({node.nonce for node in made}) == THREADS, made
    assert FORCED in {node.nonce for node in made}
    assert sorted(store.query().all()) == sorted(made)
