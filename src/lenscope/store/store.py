"""The lineage store: nodes and their edges, status, config, values, checkpoints (S1-S3, S5, S7)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import IntegrityError

from lenscope.errors import StoreError, UsageError, hint
from lenscope.store.artifacts import ArtifactsMixin
from lenscope.store.base import NodeLike, as_nodes, check_name, in_lists
from lenscope.store.blobs import Payload
from lenscope.store.checkpoints import CheckpointsMixin
from lenscope.store.graph import GraphMixin
from lenscope.store.node import Node, new_nonce
from lenscope.store.node_html import node_html
from lenscope.store.query import Query
from lenscope.store.schema import artifacts, edges, lineage_nonce, nodes, records
from lenscope.store.values import Scalar, check_values, decode, dump_config, encode, load_config

if TYPE_CHECKING:
    from lenscope.store.leases import Lease

STATUSES = ("running", "done", "failed")
NONCE_ATTEMPTS = 5  # transactions new_nodes tries when concurrent writers keep drawing its nonces


@dataclass(frozen=True)
class NodeRecord:
    """Everything the store holds about one node, as returned by `Store.get`."""

    node: Node
    status: str
    values: dict[str, Scalar] = field(default_factory=dict)
    artifacts: dict[str, Payload] = field(default_factory=dict)
    checkpoint: Path | None = None
    parents: list[Node] = field(default_factory=list)
    config: dict | None = None
    created: float = 0.0
    error: str | None = None

    def _repr_html_(self) -> str:
        """The node in a notebook: address, status, parents, values, artifacts and checkpoint (node_html.py)."""
        return node_html(self)


class Store(GraphMixin, ArtifactsMixin, CheckpointsMixin):
    """A lineage store: `Store()` opens $LENSCOPE_STORE or ./runs; `Store(folder)` or `Store(url)` another one."""

    # ---- nodes -------------------------------------------------------------------------------

    def new_node(self, name: str, parents: Sequence[NodeLike] = (), config: Mapping | None = None) -> Node:
        """Start a new lineage of `name` (job names like `grokking/train` are cleaned) at seq 0, status running."""
        return self.new_nodes([name], parents=parents, config=config)[0]

    def new_nodes(
        self, names: Iterable[str], parents: Sequence[NodeLike] = (), config: Mapping | None = None
    ) -> list[Node]:
        """Start one new lineage per name in one transaction; each gets `parents` and `config`."""
        self._check_writable("new_node")
        names = [Node.clean_name(check_name(name, "node name")) for name in names]
        parent_nodes = as_nodes(parents, "parents")
        config_text = dump_config(config)
        if not names:
            return []
        now = time.time()
        for attempt in itertools.count(1):
            try:
                with self._write("new_node") as connection:
                    parent_ids = [self._node_id(connection, parent) for parent in parent_nodes]
                    nonces = self._fresh_nonces(connection, len(names))
                    made = [Node(name, nonce, 0) for name, nonce in zip(names, nonces)]
                    ids = self._insert_nodes(connection, made, config_text, now)
                    self._insert_edges(connection, ids, parent_ids)
                return made
            except IntegrityError as error:
                # A concurrent writer took one of these nonces after we checked (PostgreSQL): draw again.
                if not _nonce_taken(error) or attempt == NONCE_ATTEMPTS:
                    raise StoreError(f"new_node: could not start a lineage: {error.orig}") from error

    @staticmethod
    def _fresh_nonces(connection: Connection, count: int) -> list[str]:
        """`count` distinct random nonces that no lineage in the store uses yet."""
        chosen: dict[str, None] = {}
        for _ in range(100):
            candidates = {new_nonce() for _ in range(count - len(chosen))} - chosen.keys()
            used: set[str] = set()
            for chunk in in_lists(sorted(candidates)):
                rows = connection.execute(select(nodes.c.nonce).where(nodes.c.nonce.in_(chunk)))
                used.update(row.nonce for row in rows)
            chosen.update(dict.fromkeys(candidates - used))
            if len(chosen) == count:
                return list(chosen)
        raise StoreError("could not find unused lineage nonces after 100 tries; the nonce space is nearly full")

    @staticmethod
    def _insert_nodes(
        connection: Connection, made: list[Node], config_text: str | None, now: float, last_running: bool = False
    ) -> list[int]:
        """Insert nodes (all running, or all done but the last when `last_running`); returns their ids."""
        rows = [
            dict(name=n.name, nonce=n.nonce, seq=n.seq, config=config_text, created=now,
                 status="running" if not last_running or i == len(made) - 1 else "done")
            for i, n in enumerate(made)
        ]
        result = connection.execute(insert(nodes).returning(nodes.c.id, sort_by_parameter_order=True), rows)
        return [row.id for row in result]

    @staticmethod
    def _insert_edges(connection: Connection, child_ids: list[int], parent_ids: list[int]) -> None:
        rows = [
            dict(child_id=child, parent_id=parent, position=position)
            for child in child_ids
            for position, parent in enumerate(dict.fromkeys(parent_ids))
        ]
        if rows:
            connection.execute(insert(edges), rows)

    def tick(self, node: NodeLike, count: int = 1, *, adopt: bool = False, config: Mapping | None = None) -> Node:
        """Advance `node` to its successor (seq + 1, parent = node, same config) and mark `node` done.

        `count > 1` adds that many successive nodes in one transaction (each the parent of the
        next, all but the last done) and returns the last: a job that ticked in memory catches up.
        `adopt=True` (a resumed run) reuses successors an earlier, interrupted run left behind
        instead of refusing them; their values fold under the new writes.
        `config` is what the new (and adopted) nodes record instead of `node`'s: the config a resumed
        run with overrides was actually made with.
        """
        node = Node.coerce(node)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise UsageError(f"tick count must be an int >= 1, got {count!r}")
        Node(node.name, node.nonce, node.seq + count)  # the last seq in range, checked before any node is made
        made = [Node(node.name, node.nonce, node.seq + k) for k in range(1, count + 1)]
        config_text = dump_config(config) if config is not None else None
        with self._write("tick") as connection:
            node_id = self._node_id(connection, node)
            row = connection.execute(select(nodes.c.config, nodes.c.status).where(nodes.c.id == node_id)).one()
            config_text = row.config if config is None else config_text
            later = {r.seq: r.id for r in connection.execute(
                select(nodes.c.seq, nodes.c.id).where(nodes.c.name == node.name, nodes.c.nonce == node.nonce,
                                                      nodes.c.seq > node.seq, nodes.c.seq <= made[-1].seq))}
            if later and not adopt:
                taken = Node(node.name, node.nonce, min(later))
                raise StoreError(f"cannot tick {node}: {taken} already exists (only the owner of a node ticks it)")
            if row.status == "running":
                connection.execute(update(nodes).where(nodes.c.id == node_id).values(status="done"))
            missing = [n for n in made if n.seq not in later]
            if missing:
                ids = self._insert_nodes(connection, missing, config_text, time.time())
                later.update({n.seq: i for n, i in zip(missing, ids)})
            chain = [node_id] + [later[n.seq] for n in made]
            new_ids = {later[n.seq] for n in missing}
            for parent_id, child_id in zip(chain, chain[1:]):
                if child_id in new_ids:
                    self._insert_edges(connection, [child_id], [parent_id])
            if config is not None and len(new_ids) < count:  # adopted nodes are made again, with this config
                connection.execute(update(nodes).where(nodes.c.id.in_(chain[1:]), nodes.c.id.not_in(list(new_ids)))
                                   .values(config=config_text))
            connection.execute(update(nodes).where(nodes.c.id.in_(chain[1:-1])).values(status="done", error=None))
            connection.execute(update(nodes).where(nodes.c.id == chain[-1]).values(status="running", error=None))
        return made[-1]

    def node_exists(self, node: NodeLike) -> bool:
        """Whether `node` is in the store."""
        node = Node.coerce(node)
        with self.read() as connection:
            return connection.execute(
                select(nodes.c.id).where(
                    nodes.c.name == node.name, nodes.c.nonce == node.nonce, nodes.c.seq == node.seq
                )
            ).first() is not None

    def set_status(self, node: NodeLike, status: str, error: str | None = None, *, lease: Lease | None = None) -> None:
        """Set `node`'s status to running, done or failed (with an error message if any).

        With `lease`, the lease row is deleted in the same transaction: the final status and the
        release are written together or not at all (the lock is dropped once they are).
        """
        if status not in STATUSES:
            valid = ", ".join(STATUSES)
            raise UsageError(f"unknown status {status!r}; expected one of {valid}{hint(str(status), STATUSES)}")
        if error is not None and not isinstance(error, str):
            raise UsageError(f"status error must be a string, got {type(error).__name__}")
        with self._write("set_status") as connection:
            node_id = self._node_id(connection, node)
            connection.execute(update(nodes).where(nodes.c.id == node_id).values(status=status, error=error))
            if lease is not None:
                lease.delete_row(connection)
        if lease is not None:
            lease.drop()

    def status(self, node: NodeLike) -> str:
        """`node`'s status: running, done or failed."""
        return self._column(node, nodes.c.status)

    def set_config(self, node: NodeLike, config: Mapping | None) -> None:
        """Store `config` (JSON) on `node`, replacing what was there."""
        text = dump_config(config)
        with self._write("set_config") as connection:
            node_id = self._node_id(connection, node)
            connection.execute(update(nodes).where(nodes.c.id == node_id).values(config=text))

    def config(self, node: NodeLike) -> dict | None:
        """The config stored on `node`, or None."""
        return load_config(self._column(node, nodes.c.config))

    def _column(self, node: NodeLike, column):
        with self.read() as connection:
            node_id = self._node_id(connection, node)
            return connection.execute(select(column).where(nodes.c.id == node_id)).scalar_one()

    # ---- values ------------------------------------------------------------------------------

    def record(self, node: NodeLike, values: Mapping[str, Scalar]) -> None:
        """Record scalar values on `node` in one transaction; later writes of a key win when folded."""
        self.record_many([(node, values)])

    def record_many(self, items: Iterable[tuple[NodeLike, Mapping[str, Scalar]]]) -> None:
        """Record several (node, values) pairs in one transaction."""
        self._check_writable("record")
        checked = []
        for item in items:
            try:
                node, values = item
            except (TypeError, ValueError):
                raise UsageError("record_many: each item must be (node, values)") from None
            checked.append((Node.coerce(node), check_values(values)))
        if not checked:
            return
        now = time.time()
        with self._write("record") as connection:
            ids = self._node_ids(connection, (node for node, _ in checked))
            rows = []
            for node, values in checked:
                for key, value in values.items():
                    kind, num, txt = encode(value)
                    rows.append(dict(node_id=ids[node], key=key, kind=kind, num=num, txt=txt, written=now))
            if rows:
                connection.execute(insert(records), rows)

    def values(self, node: NodeLike) -> dict[str, Scalar]:
        """`node`'s values folded into one row: the latest write of each key."""
        with self.read() as connection:
            return self._folded(connection, self._node_id(connection, node))

    @staticmethod
    def _folded(connection: Connection, node_id: int) -> dict[str, Scalar]:
        rows = connection.execute(
            select(records.c.key, records.c.kind, records.c.num, records.c.txt)
            .where(records.c.node_id == node_id)
            .order_by(records.c.id)
        )
        return {row.key: decode(row.kind, row.num, row.txt) for row in rows}

    def value_history(self, node: NodeLike, key: str) -> list[tuple[float, Scalar]]:
        """Every write of value `key` on `node`, oldest first, as (unix time, value)."""
        with self.read() as connection:
            node_id = self._node_id(connection, node)
            rows = connection.execute(
                select(records.c.written, records.c.kind, records.c.num, records.c.txt)
                .where(records.c.node_id == node_id, records.c.key == key)
                .order_by(records.c.id)
            )
            return [(row.written, decode(row.kind, row.num, row.txt)) for row in rows]

    # ---- whole nodes and queries -------------------------------------------------------------

    def get(self, node: NodeLike) -> NodeRecord:
        """Status, folded values, latest artifacts, checkpoint, parents and config of one node."""
        node = Node.coerce(node)
        with self.read() as connection:
            node_id = self._node_id(connection, node)
            row = connection.execute(select(nodes).where(nodes.c.id == node_id)).one()
            values = self._folded(connection, node_id)
            parents = self._parents(connection, node_id)
            latest = connection.execute(
                select(artifacts.c.name, artifacts.c.version, artifacts.c.filename, artifacts.c.sha256,
                       artifacts.c.size)
                .where(artifacts.c.node_id == node_id)
                .order_by(artifacts.c.name, artifacts.c.version)
            ).all()
        payloads = {a.name: a for a in latest}  # ordered by version, so the last one per name stays
        return NodeRecord(
            node=node,
            status=row.status,
            values=values,
            artifacts={name: self._payload(node, name, a) for name, a in payloads.items()},
            checkpoint=self.checkpoint_path(row.checkpoint),
            parents=parents,
            config=load_config(row.config),
            created=row.created,
            error=row.error,
        )

    def query(self) -> Query:
        """A fresh query over this store's nodes (or artifacts, after `.artifact()`)."""
        return Query(self)


def _nonce_taken(error: IntegrityError) -> bool:
    """Whether `error` is a lineage nonce or node address already taken (the race new_nodes retries)."""
    text = str(error.orig)
    return lineage_nonce.name in text or "uq_lenscope_nodes_address" in text or "lenscope_nodes.nonce" in text
