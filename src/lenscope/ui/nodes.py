"""One node as its page shows it, and one artifact version's bytes; artifact bytes are read only when shown."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Connection, select

from lenscope.errors import LenscopeError, StoreError
from lenscope.store import Node, StoreReader
from lenscope.store.schema import artifacts, edges, nodes, records
from lenscope.store.values import Scalar, decode, load_config


class Missing(LookupError):
    """A node, artifact or version the store does not hold (the UI answers 404)."""


@dataclass(frozen=True)
class ArtifactInfo:
    """One artifact version's row: what it is called, its file and where its bytes are."""

    name: str
    version: int
    filename: str
    sha256: str
    size: int
    created: float
    versions: tuple[int, ...] = ()
    provenance: dict | None = None  # what made this version: class, source file and hash, lenscope version


@dataclass
class NodeDetail:
    """Everything the node page shows except artifact contents."""

    node: Node
    status: str
    created: float
    error: str | None = None
    config: dict | None = None
    values: dict[str, Scalar] = field(default_factory=dict)
    checkpoint: Path | None = None
    checkpoint_step: int | None = None
    parents: list[Node] = field(default_factory=list)
    children: list[Node] = field(default_factory=list)
    artifacts: list[ArtifactInfo] = field(default_factory=list)


def parse_node(address: str) -> Node:
    """The node at `address`; a `Missing` for anything that is not an address."""
    try:
        return Node.parse(address)
    except LenscopeError:
        raise Missing(f"no node {address!r}") from None


def _node_row(connection: Connection, node: Node):
    row = connection.execute(
        select(nodes).where(nodes.c.name == node.name, nodes.c.nonce == node.nonce, nodes.c.seq == node.seq)
    ).first()
    if row is None:
        raise Missing(f"no node {node}")
    return row


def node_detail(store: StoreReader, node: Node) -> NodeDetail:
    """The node's row, folded values, parents, children and artifact versions, in one transaction."""
    parent, child = nodes.alias("parent"), nodes.alias("child")
    with store.read() as connection:
        row = _node_row(connection, node)
        values = {r.key: decode(r.kind, r.num, r.txt) for r in connection.execute(
            select(records.c.key, records.c.kind, records.c.num, records.c.txt)
            .where(records.c.node_id == row.id).order_by(records.c.id))}
        parents = connection.execute(
            select(parent.c.name, parent.c.nonce, parent.c.seq).join(edges, edges.c.parent_id == parent.c.id)
            .where(edges.c.child_id == row.id).order_by(edges.c.position)).all()
        children = connection.execute(
            select(child.c.name, child.c.nonce, child.c.seq).join(edges, edges.c.child_id == child.c.id)
            .where(edges.c.parent_id == row.id).order_by(child.c.id)).all()
        versions = connection.execute(
            select(artifacts).where(artifacts.c.node_id == row.id)
            .order_by(artifacts.c.name, artifacts.c.version)).all()
    return NodeDetail(
        node=node, status=row.status, created=row.created, error=row.error, config=load_config(row.config),
        values=dict(sorted(values.items())), checkpoint=store.checkpoint_path(row.checkpoint),
        checkpoint_step=row.checkpoint_step,
        parents=[Node(r.name, r.nonce, r.seq) for r in parents],
        children=[Node(r.name, r.nonce, r.seq) for r in children],
        artifacts=_latest(versions),
    )


def _latest(rows: list) -> list[ArtifactInfo]:
    """The latest version of each artifact name (rows ordered by name, version), knowing every version."""
    by_name: dict[str, list] = {}
    for r in rows:
        by_name.setdefault(r.name, []).append(r)
    return [_info(group[-1], tuple(r.version for r in group)) for group in by_name.values()]


def _info(r, versions: tuple[int, ...]) -> ArtifactInfo:
    made = json.loads(r.provenance) if getattr(r, "provenance", None) else None
    return ArtifactInfo(r.name, r.version, r.filename, r.sha256, r.size, r.created, versions, made)


def artifact_info(store: StoreReader, node: Node, name: str, version: int | None = None) -> ArtifactInfo:
    """The row of artifact `name` on `node` (the latest version unless `version`); `Missing` if there is none."""
    with store.read() as connection:
        node_id = _node_row(connection, node).id
        rows = connection.execute(
            select(artifacts).where(artifacts.c.node_id == node_id, artifacts.c.name == name)
            .order_by(artifacts.c.version)).all()
    versions = tuple(r.version for r in rows)
    chosen = [r for r in rows if version is None or r.version == version]
    if not chosen:
        wanted = f"version {version} of " if version is not None and rows else ""
        raise Missing(f"no {wanted}artifact {name!r} on {node}")
    return _info(chosen[-1], versions)


@contextmanager
def _readable(info: ArtifactInfo) -> Iterator[None]:
    """A blob that is missing, corrupt or unreadable (permissions, a folder in its place) as a `Missing`."""
    try:
        yield
    except (OSError, StoreError) as error:
        raise Missing(f"artifact {info.name!r} cannot be read: {error}") from None


def artifact_content(store: StoreReader, info: ArtifactInfo) -> bytes:
    """The exact stored bytes of an artifact version (checked against its size and SHA-256)."""
    with _readable(info):
        return store.blobs.get(info.sha256, info.size)


def artifact_chunks(store: StoreReader, info: ArtifactInfo) -> Iterator[bytes]:
    """The same bytes in pieces, hashed as they stream (a download holds one piece at a time)."""
    return store.blobs.chunks(info.sha256, info.size, f"artifact {info.name!r}")


def artifact_head(store: StoreReader, info: ArtifactInfo, count: int) -> bytes:
    """The first `count` bytes of an artifact version (what a text preview shows; the content address is trusted)."""
    with _readable(info):
        return store.blobs.head(info.sha256, info.size, count, f"artifact {info.name!r}")


def artifact_file(store: StoreReader, info: ArtifactInfo) -> Path:
    """The blob file of an artifact version, for readers that seek (a Parquet preview reads one page's row groups)."""
    with _readable(info):  # missing, unreadable or the wrong size: a Missing
        store.blobs.head(info.sha256, info.size, 0, f"artifact {info.name!r}")
    return store.blobs.path(info.sha256)
