"""Checking a whole store (`lenscope fsck`): database, blobs, checkpoints, leftovers, nodes left running."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import select

from lenscope.store import leases
from lenscope.store.blobs import artifact_label
from lenscope.store.digests import FileDigest, differences, extra_files, file_sha256
from lenscope.store.garbage import MIN_AGE_S, collect
from lenscope.store.node import Node
from lenscope.store.schema import artifacts, checkpoint_files, nodes
from lenscope.store.store import Store

DAMAGE, GARBAGE, STALE, NOTE = "damage", "garbage", "stale", "note"
STALE_ERROR = "stale: the job's process was gone (marked failed by lenscope fsck --repair)"
UNLEASED_ERROR = "stale: running with no job holding its lease (marked failed by lenscope fsck --repair)"


@dataclass(frozen=True)
class Finding:
    """One thing fsck found: damage (data that cannot be read as written), garbage (files nothing refers
    to), a stale node (running, its job gone) or a note (worth knowing, not wrong); `repaired` once fixed."""

    severity: str
    message: str
    repaired: bool = False

    @property
    def problem(self) -> bool:
        """Whether it still needs attention (unrepaired damage or garbage)."""
        return self.severity != NOTE and not self.repaired

    def __str__(self) -> str:
        return f"{'repaired' if self.repaired else self.severity}: {self.message}"


def fsck(store: Store, *, repair: bool = False, min_age: float = MIN_AGE_S) -> list[Finding]:
    """Every finding in `store`; with `repair`, garbage is removed, missing checkpoint digests recorded and
    stale nodes (running, their job's process gone) marked failed.

    Damage is never "repaired" by deleting data: a corrupt blob heals when the same bytes are put
    again, a damaged checkpoint stays for the user to decide.
    """
    return (_database(store) + _blobs(store) + _checkpoints(store, repair)
            + _garbage(store, repair, min_age) + _running(store, repair))


def _database(store: Store) -> list[Finding]:
    """SQLite's own consistency check of the database file (PostgreSQL checks its pages itself)."""
    with store.read() as connection:
        if connection.dialect.name != "sqlite":
            return []
        results = [row[0] for row in connection.exec_driver_sql("PRAGMA quick_check")]
    if results == ["ok"]:
        return []
    return [Finding(DAMAGE, f"database {store.url}: {'; '.join(results[:3])}")]


def _blobs(store: Store) -> list[Finding]:
    """Every blob an artifact names exists with its recorded size and SHA-256 (each blob read once)."""
    users: dict[tuple[str, int], list[str]] = defaultdict(list)
    with store.read() as connection:
        rows = connection.execute(
            select(artifacts.c.sha256, artifacts.c.size, artifacts.c.name, artifacts.c.version,
                   nodes.c.name.label("node_name"), nodes.c.nonce, nodes.c.seq)
            .join(nodes, nodes.c.id == artifacts.c.node_id).order_by(artifacts.c.id))
        for r in rows:
            users[(r.sha256, r.size)].append(artifact_label(Node(r.node_name, r.nonce, r.seq), r.name, r.version))
    found = []
    for (digest, size), labels in users.items():
        path = store.blobs.path(digest)
        if not path.is_file():
            problem = "is missing"
        elif path.stat().st_size != size or file_sha256(path) != digest:
            problem = "is corrupt: its bytes do not match the recorded SHA-256 and size"
        else:
            continue
        more = f" (and {len(labels) - 1} more)" if len(labels) > 1 else ""
        found.append(Finding(DAMAGE, f"blob {path} {problem}; used by {labels[0]}{more}; "
                                     "putting the same bytes again heals it"))
    return found


def _checkpoints(store: Store, repair: bool) -> list[Finding]:
    """Every marked checkpoint exists and matches the digests recorded when it was marked."""
    recorded: dict[int, list[FileDigest]] = defaultdict(list)
    with store.read() as connection:
        marked = connection.execute(
            select(nodes.c.id, nodes.c.name, nodes.c.nonce, nodes.c.seq, nodes.c.checkpoint)
            .where(nodes.c.checkpoint.is_not(None)).order_by(nodes.c.id)).all()
        for r in connection.execute(select(checkpoint_files).order_by(checkpoint_files.c.path)):
            recorded[r.node_id].append(FileDigest(r.path, r.size, r.sha256))
    found = []
    for row in marked:
        node, path = Node(row.name, row.nonce, row.seq), store.checkpoint_path(row.checkpoint)
        files = recorded.get(row.id, [])
        if not path.is_dir():
            found.append(Finding(DAMAGE, f"checkpoint of {node} is missing: {path}"))
        elif not files:
            if repair:
                store.record_checkpoint_digests(node)
            found.append(Finding(NOTE, f"checkpoint of {node} at {path} has no recorded digests (marked before "
                                       "lenscope recorded them); `--repair` records them as the files are now",
                                 repaired=repair))
        else:
            found += [Finding(DAMAGE, f"checkpoint of {node} at {path}: {problem}")
                      for problem in differences(path, files)]
            found += [Finding(NOTE, f"checkpoint of {node} at {path}: {extra} was not there when it was marked")
                      for extra in extra_files(path, files)]
    return found


def _garbage(store: Store, repair: bool, min_age: float) -> list[Finding]:
    """Unreferenced blobs and leftovers of killed writes (removed with `repair`, as `lenscope gc` does)."""
    items = collect(store, dry_run=not repair, min_age=min_age)
    return [Finding(GARBAGE, str(item), repaired=repair) for item in items]


def _running(store: Store, repair: bool) -> list[Finding]:
    """Nodes still marked running: stale ones (their job's process is gone: marked failed with `repair`),
    and the rest, live or without a lease to judge them by (runs of an older lenscope)."""
    with store.read() as connection:
        rows = connection.execute(select(nodes.c.name, nodes.c.nonce, nodes.c.seq)
                                  .where(nodes.c.status == "running").order_by(nodes.c.id)).all()
    running = [Node(r.name, r.nonce, r.seq) for r in rows]
    gone = leases.stale(store, {node.lineage for node in running})
    orphans = leases.unleased(store, {node.lineage for node in running})
    found = []
    for node in running:
        if node.lineage in gone:
            found.append(Finding(STALE, f"node {node} is marked running but its job's process is gone",
                                 repaired=repair and _fail_stale(store, node, STALE_ERROR)))
        elif node.lineage in orphans:
            found.append(Finding(NOTE, f"node {node} is marked running but no job holds its lease (written from "
                                       "Python, or its job ended without writing its status: a full disk); "
                                       "`--repair` marks it failed unless a job takes the lineage meanwhile",
                                 repaired=repair and _fail_stale(store, node, UNLEASED_ERROR)))
        else:
            found.append(Finding(NOTE, f"node {node} is running (a live job holds its lease)"))
    return found


def _fail_stale(store: Store, node: Node, error: str) -> bool:
    """Mark a stale node failed, holding its lineage's lease so a job resuming it meanwhile is never overruled."""
    try:
        lease = leases.acquire(store, node)
    except leases.LeaseHeld:  # taken over since it was judged stale
        return False
    try:
        if store.status(node) != "running":
            return False
        store.set_status(node, "failed", error=error, lease=lease)
        return True
    finally:
        lease.release()
