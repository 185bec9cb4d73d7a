"""Artifact writes and reads: versioned `(node, name) -> Payload`, bytes in the blob folder (S4)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping

from sqlalchemy import Connection, func, insert, select

from lenscope.errors import StoreError, UsageError, hint
from lenscope.files import check_plain_name
from lenscope.store.base import NodeLike, StoreBase, check_name, in_lists
from lenscope.store.blobs import Payload, artifact_label, as_bytes
from lenscope.store.node import Node
from lenscope.store.schema import artifacts, nodes

ArtifactItem = tuple[NodeLike, str, str, bytes] | tuple[NodeLike, str, str, bytes, Mapping | None]


def check_artifact_name(name: object) -> str:
    """An artifact name that can be linked to: `/` may group names, but no `.` or `..` part and no backslash."""
    name = check_name(name, "artifact name")
    if "\\" in name or any(part in (".", "..") for part in name.split("/")):
        raise UsageError(f"artifact name {name!r} refused: a name may not hold a backslash or a '.' or '..' "
                         "part (a link to it could not reach it); e.g. 'attention' or 'probe/layer_1'")
    return name


class ArtifactsMixin(StoreBase):
    """The artifact half of the Store."""

    def put_artifact(self, node: NodeLike, name: str, filename: str, content: bytes, *,
                     provenance: Mapping | None = None, other_class: bool = False) -> int:
        """Add a version of artifact `name` on `node` holding `filename` with exactly `content`; returns the version.

        `provenance` (JSON: `class`, `source_file`, `source_sha256`, `lenscope`) records what made it. A
        version whose `class` differs from the latest version's is refused unless `other_class`: the
        same name from another analysis would silently read as the next version of the first one.
        """
        return self.put_artifacts([(node, name, filename, content, provenance)], other_class=other_class)[0]

    def put_artifacts(self, items: Iterable[ArtifactItem], *, other_class: bool = False) -> list[int]:
        """Add several artifact versions in one transaction (blobs written first); returns their versions."""
        self._check_writable("put_artifacts")
        checked: list[tuple[Node, str, str, bytes, str | None]] = []
        for item in items:
            try:
                node, name, filename, content, *rest = item
                if len(rest) > 1:
                    raise ValueError
            except (TypeError, ValueError):
                raise UsageError("put_artifacts: each item must be (node, name, filename, content[, provenance])") \
                    from None
            node = Node.coerce(node)
            name = check_artifact_name(name)
            filename = check_plain_name(filename, "artifact filename", filename=True)
            checked.append((node, name, filename, as_bytes(content, f"artifact {name!r} on {node}"),
                            _provenance_text(rest[0] if rest else None, name)))
        if not checked:
            return []
        with self.read() as connection:
            ids = self._node_ids(connection, (item[0] for item in checked))
            if not other_class:  # refused before any blob is written
                _check_classes(connection, ids, checked)
        # Blobs exist (fsynced, renamed into place) before any row can point at them.
        digests = self.blobs.put_many([item[3] for item in checked])
        now = time.time()
        with self._write("put_artifacts") as connection:
            versions = self._next_versions(connection, {(ids[item[0]], item[1]) for item in checked})
            if not other_class:
                _check_classes(connection, ids, checked)
            rows, out = [], []
            for (node, name, filename, content, provenance), digest in zip(checked, digests):
                key = (ids[node], name)
                versions[key] += 1
                out.append(versions[key])
                rows.append(
                    dict(node_id=key[0], name=name, version=versions[key], filename=filename,
                         sha256=digest, size=len(content), created=now, provenance=provenance)
                )
            connection.execute(insert(artifacts), rows)
            # Under the write lock `gc` also takes: a blob it removed as unreferenced just before is back.
            for digest, content in dict(zip(digests, (item[3] for item in checked))).items():
                self.blobs.ensure(digest, content)
        return out

    @staticmethod
    def _next_versions(connection: Connection, keys: set[tuple[int, str]]) -> dict[tuple[int, str], int]:
        """Current highest version per (node id, name), with the nodes' rows locked on PostgreSQL."""
        node_ids = sorted({node_id for node_id, _ in keys})
        current = {key: 0 for key in keys}
        for chunk in in_lists(node_ids):
            # FOR UPDATE serializes concurrent writers of one node on PostgreSQL; SQLite's
            # BEGIN IMMEDIATE already holds the database write lock and ignores it.
            connection.execute(select(nodes.c.id).where(nodes.c.id.in_(chunk)).with_for_update()).all()
            rows = connection.execute(
                select(artifacts.c.node_id, artifacts.c.name, func.max(artifacts.c.version).label("top"))
                .where(artifacts.c.node_id.in_(chunk))
                .group_by(artifacts.c.node_id, artifacts.c.name)
            )
            for row in rows:
                if (row.node_id, row.name) in current:
                    current[(row.node_id, row.name)] = row.top
        return current

    def artifact(self, node: NodeLike, name: str, version: int | None = None, *, lazy: bool = False) -> Payload:
        """The payload of artifact `name` on `node`: the latest version unless `version` is given.

        Its bytes are read and checked now, or with `lazy` when first wanted (`payload.chunks()` streams them).
        """
        node = Node.coerce(node)
        with self.read() as connection:
            node_id = self._node_id(connection, node)
            stmt = select(artifacts.c.version, artifacts.c.filename, artifacts.c.sha256, artifacts.c.size).where(
                artifacts.c.node_id == node_id, artifacts.c.name == name
            )
            if version is not None:
                stmt = stmt.where(artifacts.c.version == version)
            row = connection.execute(stmt.order_by(artifacts.c.version.desc()).limit(1)).first()
            if row is None:
                self._missing(connection, node, node_id, name, version)
        if lazy:
            return self._payload(node, name, row)
        return Payload(row.filename, self.blobs.get(row.sha256, row.size, artifact_label(node, name, row.version)))

    def artifact_provenance(self, node: NodeLike, name: str, version: int | None = None) -> dict | None:
        """What made artifact `name` on `node` (the latest version unless `version`), or None when not recorded."""
        node = Node.coerce(node)
        with self.read() as connection:
            node_id = self._node_id(connection, node)
            stmt = select(artifacts.c.provenance).where(artifacts.c.node_id == node_id, artifacts.c.name == name)
            if version is not None:
                stmt = stmt.where(artifacts.c.version == version)
            row = connection.execute(stmt.order_by(artifacts.c.version.desc()).limit(1)).first()
            if row is None:
                self._missing(connection, node, node_id, name, version)
        return json.loads(row.provenance) if row.provenance else None

    def artifact_history(self, node: NodeLike, name: str) -> list[tuple[int, Payload]]:
        """Every version of artifact `name` on `node`, oldest first, as (version, payload)."""
        node = Node.coerce(node)
        with self.read() as connection:
            node_id = self._node_id(connection, node)
            rows = connection.execute(
                select(artifacts.c.version, artifacts.c.filename, artifacts.c.sha256, artifacts.c.size)
                .where(artifacts.c.node_id == node_id, artifacts.c.name == name)
                .order_by(artifacts.c.version)
            ).all()
            if not rows:
                self._missing(connection, node, node_id, name, None)
        return [(row.version, self._payload(node, name, row)) for row in rows]

    def _payload(self, node: Node, name: str, row) -> Payload:
        """The lazily read payload of an artifact row (filename, sha256, size, version)."""
        return Payload.stored(row.filename, self.blobs, row.sha256, row.size, artifact_label(node, name, row.version))

    def artifact_names(self, node: NodeLike) -> list[str]:
        """Names of the artifacts on `node`, sorted."""
        with self.read() as connection:
            return self._artifact_names(connection, self._node_id(connection, node))

    @staticmethod
    def _artifact_names(connection: Connection, node_id: int) -> list[str]:
        rows = connection.execute(
            select(artifacts.c.name).where(artifacts.c.node_id == node_id).distinct().order_by(artifacts.c.name)
        )
        return [row.name for row in rows]

    def _missing(self, connection: Connection, node: Node, node_id: int, name: str, version: int | None) -> None:
        names = self._artifact_names(connection, node_id)
        if version is not None and name in names:
            top = connection.execute(
                select(func.max(artifacts.c.version)).where(artifacts.c.node_id == node_id, artifacts.c.name == name)
            ).scalar_one()
            raise StoreError(f"artifact {name!r} on {node} has no version {version}; versions are 1..{top}")
        listed = ", ".join(names) if names else "none"
        raise StoreError(f"node {node} has no artifact {name!r}{hint(name, names)}; its artifacts: {listed}")


def _provenance_text(provenance: Mapping | None, name: str) -> str | None:
    """Provenance as JSON text; a UsageError for anything else."""
    if provenance is None:
        return None
    if not isinstance(provenance, Mapping):
        raise UsageError(f"provenance of artifact {name!r} must be a mapping, got {type(provenance).__name__}")
    try:
        return json.dumps(dict(provenance), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise UsageError(f"provenance of artifact {name!r} is not storable as JSON: {error}") from None


def _same_class(one: dict, other: dict) -> bool:
    """Whether two provenances name one class under two module names (run as `__main__`, or by runpy, and
    imported): the same class name defined in the same source file."""
    file = one.get("source_file")
    return (file is not None and file == other.get("source_file")
            and one["class"].rpartition(".")[2] == other["class"].rpartition(".")[2])


def _check_classes(connection: Connection, ids: dict[Node, int], checked: list) -> None:
    """Refuse a version whose provenance class differs from the class of the latest version of that name."""
    for node, name, _, _, text in checked:
        now = json.loads(text) if text else {}
        made = now.get("class")
        if made is None:
            continue
        row = connection.execute(
            select(artifacts.c.provenance).where(artifacts.c.node_id == ids[node], artifacts.c.name == name)
            .order_by(artifacts.c.version.desc()).limit(1)).first()
        before = json.loads(row.provenance) if row is not None and row.provenance else {}
        if before.get("class") not in (None, made) and not _same_class(before, now):
            raise UsageError(
                f"artifact {name!r} on {node} was written by {before['class']} ({before.get('source_file', '?')}), "
                f"not by {made}: give this analysis another NAME, or allow a version from another class "
                "(other_class=True; `training/analysis_other_class=true` for analyses)")
