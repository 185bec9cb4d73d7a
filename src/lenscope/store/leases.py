"""Leases: one live job owns a lineage; a second one is refused while it lives; a dead owner's is stale.

A lease is a row of `lenscope_leases` (the owner's host, pid and heartbeat) plus a lock that dies with
the owning process: on SQLite an advisory lock (flock) on `<root>/leases/<name>@<nonce>.lock`, on
PostgreSQL a session advisory lock on a connection kept open for the run. Whether an owner is gone:
on PostgreSQL its lock is no longer held; on SQLite its pid no longer exists (same host) or its
heartbeat, written every HEARTBEAT_S, is older than STALE_AFTER_S (another host).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection, delete, insert, select, text, tuple_, update

from lenscope.errors import UsageError
from lenscope.store.base import StoreBase, in_lists
from lenscope.store.node import Node
from lenscope.store.schema import leases

HEARTBEAT_S = 30.0
"""How often a job holding a lease writes its heartbeat."""
STALE_AFTER_S = 300.0
"""An owner whose heartbeat is older than this is taken for dead (what decides for another host's SQLite job)."""
HOST = socket.gethostname()
Lineage = tuple[str, str]  # (name, nonce)
log = logging.getLogger("lenscope.leases")


class LeaseHeld(UsageError):
    """Another live job runs this lineage."""


@dataclass(frozen=True)
class Owner:
    """Who holds (or last held) a lineage's lease."""

    host: str
    pid: int
    heartbeat: float

    def alive(self, now: float) -> bool:
        """Whether the owner still runs, judged without its lock: its pid on this host, else a fresh heartbeat."""
        if now - self.heartbeat > STALE_AFTER_S:
            return False
        return self.host != HOST or _pid_alive(self.pid)

    def describe(self, now: float) -> str:
        """`pid 123 on host h, heartbeat 4 s ago`, naming this process when it is the owner."""
        mine = (self.host, self.pid) == (HOST, os.getpid())
        who = "this process (a job set up and not cleaned up yet)" if mine else f"pid {self.pid} on {self.host}"
        return f"{who}, heartbeat {max(0.0, now - self.heartbeat):.0f} s ago"


def _pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2] != "Z"
    return True


def _is_sqlite(store: StoreBase) -> bool:
    return store._location.sqlite_file is not None


def _key(name: str, nonce: str) -> int:
    """The PostgreSQL advisory-lock key of a lineage: 64 bits of a hash of its name and nonce."""
    digest = hashlib.sha256(f"lenscope.lease:{name}@{nonce}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class _FileLock:
    """An flock on one file: held while the file stays open in this process, released when it closes or dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)  # not inherited by child processes
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


class _AdvisoryLock:
    """A PostgreSQL session advisory lock on a connection of its own, held until released or the process dies."""

    def __init__(self, store: StoreBase, key: int) -> None:
        self.store, self.key = store, key
        self._connection: Connection | None = None

    def try_acquire(self) -> bool:
        connection = self.store._engine().connect().execution_options(isolation_level="AUTOCOMMIT")
        got = connection.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": self.key}).scalar()
        if not got:
            connection.close()
            return False
        self._connection = connection
        return True

    def release(self) -> None:
        if self._connection is None:
            return
        connection, self._connection = self._connection, None
        try:
            connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": self.key})
            connection.close()
        except Exception:  # noqa: BLE001  (closing the session releases the lock too)
            connection.invalidate()


class Lease:
    """A held lease on one lineage: its heartbeat is written on a background thread until `release()`."""

    def __init__(self, store: StoreBase, lineage: Lineage, token: str, lock: _FileLock | _AdvisoryLock) -> None:
        self.store, self.lineage, self.token = store, lineage, token
        self._lock = lock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="lenscope-lease", daemon=True)
        self._thread.start()

    def _where(self):
        name, nonce = self.lineage
        return (leases.c.name == name) & (leases.c.nonce == nonce) & (leases.c.token == self.token)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                with self.store._write("lease heartbeat") as connection:
                    connection.execute(update(leases).where(self._where()).values(heartbeat=time.time()))
            except Exception:  # noqa: BLE001  (a missed beat is retried; it must never disturb the job)
                log.debug("lease heartbeat of %s@%s not written", *self.lineage, exc_info=True)

    def release(self) -> None:
        """Delete the lease row and drop the lock; idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        try:
            with self.store._write("release lease") as connection:
                self.delete_row(connection)
        finally:
            self._lock.release()

    def delete_row(self, connection: Connection) -> None:
        """Delete the lease row inside the caller's transaction (a final status written with it); `drop()` after."""
        connection.execute(delete(leases).where(self._where()))

    def drop(self) -> None:
        """Stop the heartbeat and drop the lock, keeping the row: once this process is gone the lineage is stale.

        What a job whose final status could not be written does (a full disk), so `--resume` and
        `lenscope fsck --repair` can take the lineage over instead of finding it running with no owner.
        """
        self._stop.set()
        self._lock.release()


def _owners(connection: Connection, lineages: Iterable[Lineage]) -> dict[Lineage, Owner]:
    """The lease rows of these lineages."""
    wanted, found = list(dict.fromkeys(lineages)), {}
    for chunk in in_lists(wanted):
        rows = connection.execute(select(leases).where(tuple_(leases.c.name, leases.c.nonce).in_(chunk)))
        found.update({(r.name, r.nonce): Owner(r.host, r.pid, r.heartbeat) for r in rows})
    return found


def _held_keys(connection: Connection) -> set[int]:
    """The advisory-lock keys (one 64-bit key each) held in this PostgreSQL database right now."""
    rows = connection.execute(text(
        "SELECT classid::bigint AS hi, objid::bigint AS lo FROM pg_locks WHERE locktype = 'advisory' "
        "AND granted AND objsubid = 1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    ))
    keys = set()
    for row in rows:
        unsigned = (row.hi << 32) | row.lo
        keys.add(unsigned - (1 << 64) if unsigned >= 1 << 63 else unsigned)
    return keys


def acquire(store: StoreBase, node: Node) -> Lease:
    """Take the lease of `node`'s lineage for this process; LeaseHeld naming the owner while another one lives.

    A lineage whose owner died (a stale one) is taken over.
    """
    name, nonce = node.lineage
    lock: _FileLock | _AdvisoryLock
    if _is_sqlite(store):
        lock = _FileLock(store.root / "leases" / f"{name}@{nonce}.lock")
    else:
        lock = _AdvisoryLock(store, _key(name, nonce))
    now = time.time()
    if not lock.try_acquire():
        with store.read() as connection:
            owner = _owners(connection, [(name, nonce)]).get((name, nonce))
        raise LeaseHeld(_held_message(node, owner.describe(now) if owner else "another process"))
    token = secrets.token_hex(8)
    try:
        with store._write("take lease") as connection:
            owner = _owners(connection, [(name, nonce)]).get((name, nonce))
            if owner is not None and owner.host != HOST and _is_sqlite(store) and owner.alive(now):
                raise LeaseHeld(_held_message(node, owner.describe(now)))  # a lock on another host may not show
            connection.execute(delete(leases).where(leases.c.name == name, leases.c.nonce == nonce))
            connection.execute(insert(leases).values(name=name, nonce=nonce, host=HOST, pid=os.getpid(), token=token,
                                                     started=now, heartbeat=now))
    except BaseException:
        lock.release()
        raise
    return Lease(store, (name, nonce), token, lock)


def _held_message(node: Node, owner: str) -> str:
    return (f"lineage {node.name}@{node.nonce} is being run by {owner}; only one job runs a lineage at a time: "
            "wait for it to end or stop it (a lineage whose job died is taken over), "
            "or start a new lineage from this checkpoint with --branch")


def stale(store: StoreBase, lineages: Iterable[Lineage]) -> set[Lineage]:
    """The lineages among these whose lease owner is gone (lineages without a lease row are not judged)."""
    now = time.time()
    with store.read() as connection:
        owners = _owners(connection, lineages)
        if not owners:
            return set()
        if _is_sqlite(store):
            return {lineage for lineage, owner in owners.items() if not owner.alive(now)}
        held = _held_keys(connection)
    return {lineage for lineage in owners if _key(*lineage) not in held}


def unleased(store: StoreBase, lineages: Iterable[Lineage]) -> set[Lineage]:
    """The lineages among these that have no lease row at all (no job holds or held them)."""
    lineages = set(lineages)
    with store.read() as connection:
        return lineages - set(_owners(connection, lineages))


def owner(store: StoreBase, lineage: Lineage) -> Owner | None:
    """The lease row of one lineage: who runs it now (or ran it, if stale)."""
    with store.read() as connection:
        return _owners(connection, [lineage]).get(lineage)


def mark_stale(store: StoreBase, rows: list[dict]) -> list[dict]:
    """Rows of `ls`/`show` with status `stale` where a node is `running` but its lineage's job is gone."""
    running = {Node.parse(row["node"]).lineage for row in rows if row.get("status") == "running"}
    gone = stale(store, running) if running else set()
    if not gone:
        return rows
    return [{**row, "status": "stale"} if row.get("status") == "running" and Node.parse(row["node"]).lineage in gone
            else row for row in rows]
