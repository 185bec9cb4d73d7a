"""Lineage-level reads for resuming a job: one node's status, and the head and last checkpoint of each lineage."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import and_, func, select

from lenscope.store.base import NodeLike, StoreBase
from lenscope.store.node import Node
from lenscope.store.schema import nodes
from lenscope.store.values import load_config


@dataclass(frozen=True)
class Head:
    """The highest-seq node of one lineage with its status and config, and its last checkpointed node."""

    node: Node
    status: str
    error: str | None
    config: dict | None
    checkpoint: Node | None


def node_state(store: StoreBase, node: NodeLike) -> tuple[str, str | None]:
    """(status, error) of one node."""
    with store.read() as connection:
        node_id = store._node_id(connection, node)
        row = connection.execute(select(nodes.c.status, nodes.c.error).where(nodes.c.id == node_id)).one()
    return row.status, row.error


def heads(store: StoreBase, name: str) -> list[Head]:
    """The head of every lineage of node name `name`, the most recently started lineage first (one snapshot)."""
    name = Node.clean_name(name)
    top = (select(nodes.c.nonce, func.max(nodes.c.seq).label("seq"), func.min(nodes.c.id).label("first"))
           .where(nodes.c.name == name).group_by(nodes.c.nonce).subquery("top"))
    marked = (select(nodes.c.nonce, func.max(nodes.c.seq).label("seq"))
              .where(nodes.c.name == name, nodes.c.checkpoint.is_not(None)).group_by(nodes.c.nonce))
    with store.read() as connection:
        rows = connection.execute(
            select(nodes.c.nonce, nodes.c.seq, nodes.c.status, nodes.c.error, nodes.c.config)
            .join(top, and_(nodes.c.name == name, nodes.c.nonce == top.c.nonce, nodes.c.seq == top.c.seq))
            .order_by(top.c.first.desc())
        ).all()
        checkpoints = {row.nonce: row.seq for row in connection.execute(marked)}
    return [Head(Node(name, r.nonce, r.seq), r.status, r.error, load_config(r.config),
                 Node(name, r.nonce, checkpoints[r.nonce]) if r.nonce in checkpoints else None) for r in rows]
