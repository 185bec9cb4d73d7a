"""Reading the lineage graph: parents, ancestors, children and the latest node of a lineage (S1, S2)."""

from __future__ import annotations

from sqlalchemy import Connection, and_, func, literal, select

from lenscope.errors import UsageError
from lenscope.store.base import NodeLike, StoreBase
from lenscope.store.node import Node
from lenscope.store.schema import edges, nodes


class GraphMixin(StoreBase):
    """The graph-reading half of the Store."""

    def parents(self, node: NodeLike) -> list[Node]:
        """`node`'s parents in the order they were given."""
        with self.read() as connection:
            return self._parents(connection, self._node_id(connection, node))

    @staticmethod
    def _parents(connection: Connection, node_id: int) -> list[Node]:
        rows = connection.execute(
            select(nodes.c.name, nodes.c.nonce, nodes.c.seq)
            .join(edges, edges.c.parent_id == nodes.c.id)
            .where(edges.c.child_id == node_id)
            .order_by(edges.c.position)
        )
        return [Node(r.name, r.nonce, r.seq) for r in rows]

    def children(self, node: NodeLike) -> list[Node]:
        """Nodes that have `node` as a parent, oldest first (its successor and any branches)."""
        with self.read() as connection:
            node_id = self._node_id(connection, node)
            rows = connection.execute(
                select(nodes.c.name, nodes.c.nonce, nodes.c.seq)
                .join(edges, edges.c.child_id == nodes.c.id)
                .where(edges.c.parent_id == node_id)
                .order_by(nodes.c.id)
            )
            return [Node(r.name, r.nonce, r.seq) for r in rows]

    def ancestors(self, node: NodeLike) -> list[Node]:
        """Every ancestor of `node`, nearest first (one recursive SQL statement)."""
        with self.read() as connection:
            node_id = self._node_id(connection, node)
            up = (
                select(edges.c.parent_id.label("id"), literal(1).label("depth"))
                .where(edges.c.child_id == node_id)
                .cte("ancestry", recursive=True)
            )
            up = up.union(select(edges.c.parent_id, up.c.depth + 1).where(edges.c.child_id == up.c.id))
            nearest = func.min(up.c.depth).label("nearest")
            rows = connection.execute(
                select(nodes.c.name, nodes.c.nonce, nodes.c.seq, nearest)
                .join(up, up.c.id == nodes.c.id)
                .group_by(nodes.c.id, nodes.c.name, nodes.c.nonce, nodes.c.seq)
                .order_by(nearest, nodes.c.id.desc())
            )
            return [Node(r.name, r.nonce, r.seq) for r in rows]

    def latest(self, name: str | None = None, nonce: str | None = None) -> Node | None:
        """The highest-seq node of the newest lineage (optionally of job `name` and/or `nonce`), or None."""
        first = select(nodes.c.name, nodes.c.nonce).where(nodes.c.seq == 0)
        if name is not None:
            first = first.where(nodes.c.name == Node.clean_name(name))
        if nonce is not None:
            if not isinstance(nonce, str):
                raise UsageError(f"nonce must be a string of 6 hex digits, got {nonce!r}")
            first = first.where(nodes.c.nonce == nonce)
        newest = first.order_by(nodes.c.id.desc()).limit(1).subquery("newest")
        stmt = (
            select(nodes.c.name, nodes.c.nonce, nodes.c.seq)
            .join(newest, and_(nodes.c.name == newest.c.name, nodes.c.nonce == newest.c.nonce))
            .order_by(nodes.c.seq.desc())
            .limit(1)
        )
        with self.read() as connection:
            row = connection.execute(stmt).first()
        return None if row is None else Node(row.name, row.nonce, row.seq)
