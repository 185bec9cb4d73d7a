"""The runs list: one summary row per lineage (status, steps, latest main metrics, counts, branches, resumes).

Each summary is a handful of SQL statements over the whole store, not one per lineage, so the
list costs the same whether a lineage has ten nodes or a hundred thousand.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from sqlalchemy import Connection, and_, func, select, true

from lenscope.errors import LenscopeError
from lenscope.store import Node, Store, StoreReader
from lenscope.store.config_keys import flatten
from lenscope.store.leases import stale
from lenscope.store.schema import artifacts, edges, nodes, records
from lenscope.store.values import Scalar, decode

MAIN_KEYS = 4
ANALYSIS_PREFIX = "analysis/"  # where an analysis' values go: read after the job's own
_RANK = (re.compile(r"loss", re.I), re.compile(r"acc", re.I))  # what a reader looks at first


@dataclass(frozen=True)
class LineageRow:
    """One lineage (a job's run: name and nonce) as the runs page lists it."""

    name: str
    nonce: str
    status: str
    last_seq: int
    nodes: int
    created: float
    updated: float
    checkpoints: int = 0
    artifacts: int = 0
    error: str | None = None
    values: dict[str, Scalar] = field(default_factory=dict)
    parents: tuple[str, ...] = ()
    branches: int = 0
    resumed: bool = False
    config: dict[str, object] = field(default_factory=dict)  # the last node's config leaves, `config/...` keys

    @property
    def lineage(self) -> str:
        """`name@nonce`, the run page's address."""
        return f"{self.name}@{self.nonce}"

    @property
    def parent_groups(self) -> list[tuple[str, list[str]]]:
        """The parents of the first node grouped by lineage: (`name@nonce`, [their addresses]), in order."""
        groups: dict[str, list[str]] = {}
        for address in self.parents:
            groups.setdefault(address.rpartition(":")[0], []).append(address)
        return list(groups.items())


def rank_keys(keys: Sequence[str]) -> list[str]:
    """Value keys in reading order: the job's own values before analyses' (`analysis/...`), and within each losses
    first, then accuracies, then the rest; each group sorted."""
    def order(key: str) -> tuple[bool, int, str]:
        group = next((i for i, pattern in enumerate(_RANK) if pattern.search(key)), len(_RANK))
        return key.startswith(ANALYSIS_PREFIX), group, key

    return sorted(dict.fromkeys(keys), key=order)


def value_keys(store: StoreReader) -> list[str]:
    """Every value key recorded anywhere in the store, in `rank_keys` order."""
    with store.read() as connection:
        keys = connection.execute(select(records.c.key).distinct()).scalars().all()
    return rank_keys(keys)


def lineage_rows(store: StoreReader, keys: Sequence[str] | None = None,
                 only: tuple[str, str] | None = None) -> list[LineageRow]:
    """A summary of every lineage (or `only` the (name, nonce) given), newest first, with the latest value of
    each of `keys` (default: the main keys)."""
    with store.read() as connection:
        if keys is None:
            keys = rank_keys(connection.execute(select(records.c.key).distinct()).scalars().all())[:MAIN_KEYS]
        keys = list(keys)
        base = _summaries(connection, only)
        counts = _artifact_counts(connection, only)
        parents, branches = _branches(connection)
        latest, resumed = _latest_values(connection, keys, only)
    rows = []
    for r in base:
        lineage = (r.name, r.nonce)
        rows.append(LineageRow(
            name=r.name, nonce=r.nonce, status=r.status, last_seq=r.last_seq, nodes=r.count, created=r.created,
            updated=r.updated, checkpoints=r.checkpoints, artifacts=counts.get(lineage, 0), error=r.error,
            values=latest.get(lineage, {}), parents=tuple(parents.get(lineage, ())),
            branches=branches.get(lineage, 0), resumed=lineage in resumed,
            config=flatten(json.loads(r.config)) if r.config else {},
        ))
    return rows


def in_lineage(table, only: tuple[str, str] | None):
    """The SQL condition `table` (nodes or an alias) is in lineage `only` = (name, nonce); true when None."""
    return true() if only is None else and_(table.c.name == only[0], table.c.nonce == only[1])


def _summaries(connection: Connection, only: tuple[str, str] | None) -> list:
    """Per lineage: node count, last seq, first and last creation, checkpoints, and the last node's status."""
    agg = (
        select(nodes.c.name, nodes.c.nonce, func.count().label("count"), func.max(nodes.c.seq).label("last_seq"),
               func.min(nodes.c.created).label("created"), func.max(nodes.c.created).label("updated"),
               func.count(nodes.c.checkpoint).label("checkpoints"))
        .where(in_lineage(nodes, only))
        .group_by(nodes.c.name, nodes.c.nonce)
        .subquery("agg")
    )
    last = nodes.alias("last")
    stmt = (
        select(agg, last.c.status, last.c.error, last.c.config)
        .join(last, and_(last.c.name == agg.c.name, last.c.nonce == agg.c.nonce, last.c.seq == agg.c.last_seq))
        .order_by(agg.c.created.desc(), agg.c.nonce)
    )
    return connection.execute(stmt).all()


def _artifact_counts(connection: Connection, only: tuple[str, str] | None) -> dict[tuple[str, str], int]:
    """Per lineage: how many (node, artifact name) pairs it holds (versions counted once)."""
    pairs = select(artifacts.c.node_id, artifacts.c.name).group_by(artifacts.c.node_id, artifacts.c.name).subquery()
    stmt = (
        select(nodes.c.name, nodes.c.nonce, func.count().label("count"))
        .join(pairs, pairs.c.node_id == nodes.c.id)
        .where(in_lineage(nodes, only))
        .group_by(nodes.c.name, nodes.c.nonce)
    )
    return {(r.name, r.nonce): r.count for r in connection.execute(stmt)}


def _branches(connection: Connection) -> tuple[dict[tuple[str, str], list[str]], dict[tuple[str, str], int]]:
    """Which nodes each branched lineage started from, and how many lineages started from each lineage."""
    child, parent = nodes.alias("child"), nodes.alias("parent")
    stmt = (
        select(child.c.name, child.c.nonce, parent.c.name.label("pname"), parent.c.nonce.label("pnonce"),
               parent.c.seq.label("pseq"))
        .select_from(edges.join(child, child.c.id == edges.c.child_id).join(parent, parent.c.id == edges.c.parent_id))
        .where(child.c.seq == 0)
        .order_by(edges.c.position)
    )
    parents: dict[tuple[str, str], list[str]] = {}
    children: dict[tuple[str, str], set[tuple[str, str]]] = {}  # a crosscoder reading 4 checkpoints is 1 branch
    for r in connection.execute(stmt):
        parents.setdefault((r.name, r.nonce), []).append(Node(r.pname, r.pnonce, r.pseq).address)
        children.setdefault((r.pname, r.pnonce), set()).add((r.name, r.nonce))
    return parents, {lineage: len(started) for lineage, started in children.items()}


def _latest_values(connection: Connection, keys: list[str], only: tuple[str, str] | None) -> tuple[dict, set]:
    """The latest value of each key per lineage (highest seq having it, then newest write), and which lineages
    resumed: a key written twice on a node without a checkpoint means a training run restarted from an earlier
    checkpoint and recorded those steps again. An analysis or evaluation with `--base` writes again only on the
    checkpointed node it restored, which changes no run's history.

    Each latest value is a correlated subquery that walks the lineage's nodes from the newest one and
    stops at the first that has the key: cheap however long the lineage.
    """
    if not keys:
        return {}, set()
    heads = select(nodes.c.name, nodes.c.nonce).where(nodes.c.seq == 0, in_lineage(nodes, only)).subquery("heads")
    columns = []
    for i, key in enumerate(keys):
        node, record = nodes.alias(f"n{i}"), records.alias(f"r{i}")
        columns.append(
            select(record.c.id).select_from(node.join(record, record.c.node_id == node.c.id))
            .where(node.c.name == heads.c.name, node.c.nonce == heads.c.nonce, record.c.key == key)
            .order_by(node.c.seq.desc(), record.c.id.desc()).limit(1).scalar_subquery().label(f"k{i}"))
    found = connection.execute(select(heads.c.name, heads.c.nonce, *columns)).all()
    wanted = {row[2 + i]: ((row.name, row.nonce), key) for row in found for i, key in enumerate(keys)
              if row[2 + i] is not None}
    latest: dict[tuple[str, str], dict[str, Scalar]] = {}
    ids = sorted(wanted)
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for r in connection.execute(select(records.c.id, records.c.kind, records.c.num, records.c.txt)
                                    .where(records.c.id.in_(chunk))):
            lineage, key = wanted[r.id]
            latest.setdefault(lineage, {})[key] = decode(r.kind, r.num, r.txt)
    twice = (select(records.c.node_id).where(records.c.key.in_(keys))
             .group_by(records.c.node_id, records.c.key).having(func.count() > 1).subquery("twice"))
    resumed = connection.execute(select(nodes.c.name, nodes.c.nonce).distinct()
                                 .join(twice, twice.c.node_id == nodes.c.id)
                                 .where(in_lineage(nodes, only), nodes.c.checkpoint.is_(None))).all()
    return latest, {(r.name, r.nonce) for r in resumed}

def with_liveness(store: Store, rows: list[LineageRow]) -> list[LineageRow]:
    """`rows` with status `stale` where a lineage is `running` but the job that owns it is gone (store.leases)."""
    running = [(row.name, row.nonce) for row in rows if row.status == "running"]
    gone = stale(store, running) if running else set()
    return [replace(row, status="stale") if (row.name, row.nonce) in gone else row for row in rows]


def lineage_ids(store: StoreReader) -> list[tuple[str, str]]:
    """(name, nonce) of every lineage, newest first (for choosing runs to compare)."""
    stmt = select(nodes.c.name, nodes.c.nonce).where(nodes.c.seq == 0).order_by(nodes.c.id.desc())
    with store.read() as connection:
        return [(r.name, r.nonce) for r in connection.execute(stmt)]


def parse_lineage(text: str) -> tuple[str, str] | None:
    """(name, nonce) from `name@nonce`, or None when `text` has another form."""
    name, at, nonce = str(text).rpartition("@")
    if not at:
        return None
    try:
        Node(name, nonce, 0)
    except LenscopeError:
        return None
    return name, nonce
