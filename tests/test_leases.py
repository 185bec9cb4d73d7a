"""Leases on SQLite and a real PostgreSQL server: one live job per lineage, a dead owner's lineage is stale."""

from __future__ import annotations

import os
import time

import pytest
from pg_server import postgres_server, postgres_url  # noqa: F401
from store_fixtures import backend, store, store_url  # noqa: F401

from lenscope.examples.grokking import GrokTrainer
from lenscope.runner import run_job
from lenscope.store import Node
from lenscope.store.leases import HOST, STALE_AFTER_S, LeaseHeld, acquire, mark_stale, owner, stale
from lenscope.store.schema import leases


def test_a_second_lease_is_refused_naming_the_owner_until_released(store):
    node = store.new_node("job")
    lease = acquire(store, node)
    held = owner(store, node.lineage)
    assert (held.host, held.pid) == (HOST, os.getpid())
    with pytest.raises(LeaseHeld, match=rf"lineage job@{node.nonce} is being run by this process \(a job set up and "
                                         r"not cleaned up yet\), heartbeat 0 s ago; only one job runs a lineage"):
        acquire(store, Node("job", node.nonce, 0))
    assert stale(store, [node.lineage]) == set()
    lease.release()
    lease.release()  # idempotent
    assert owner(store, node.lineage) is None
    acquire(store, node).release()


def _fake_owner(store, node: Node, host: str, pid: int, age: float) -> None:
    now = time.time()
    with store._write("test") as connection:
        connection.execute(leases.insert().values(name=node.name, nonce=node.nonce, host=host, pid=pid,
                                                  token="0" * 16, started=now - age, heartbeat=now - age))


def test_a_dead_owner_makes_the_running_node_stale_and_its_lineage_is_taken_over(store, backend):
    node = store.new_node("job")
    dead = 2 ** 22 + 12345  # above the kernel's default pid_max: no such process
    _fake_owner(store, node, HOST, dead, age=1.0)
    assert stale(store, [node.lineage]) == {node.lineage}
    rows = mark_stale(store, [{"node": str(node), "status": "running"}, {"node": str(node), "status": "done"}])
    assert [r["status"] for r in rows] == ["stale", "done"]
    lease = acquire(store, node)  # taken over
    assert owner(store, node.lineage).pid == os.getpid() and stale(store, [node.lineage]) == set()
    lease.release()


@pytest.mark.parametrize("age", [1.0, STALE_AFTER_S + 60])
def test_another_hosts_owner_is_judged_by_its_heartbeat(store, backend, age):
    node = store.new_node("job")
    _fake_owner(store, node, "elsewhere.example", 4242, age=age)
    gone = stale(store, [node.lineage]) == {node.lineage}
    if backend == "postgresql":
        assert gone  # PostgreSQL knows: nobody holds the lineage's advisory lock
        acquire(store, node).release()
    elif age < STALE_AFTER_S:
        assert not gone  # SQLite on a shared folder: a fresh heartbeat from another host counts as alive
        with pytest.raises(LeaseHeld, match="pid 4242 on elsewhere.example, heartbeat 1 s ago"):
            acquire(store, node)
    else:
        assert gone
        acquire(store, node).release()


def test_a_second_resume_of_a_running_lineage_is_refused_and_writes_nothing(tiny, store_url):
    done = run_job(GrokTrainer, tiny + ["training/steps=20"], store=store_url)
    first = GrokTrainer(tiny, base=done, store=store_url)
    first.setup(resume=True)
    second = GrokTrainer(tiny, base=done, store=store_url)
    with pytest.raises(LeaseHeld, match=f"lineage grokking.train@{done.nonce} is being run by this process"):
        second.setup(resume=True)
    assert second.lineage is None and first.store.status(done) == "running"
    branch = GrokTrainer(tiny, base=done, store=store_url)
    branch.setup()  # a branch is a new lineage: no conflict
    branch.cleanup()
    first.cleanup()
    assert first.store.status(done) == "done"
