"""Checkpoint folders on nodes, with a digest of every file recorded when the checkpoint is marked (S5)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Connection, delete, insert, select, update

from lenscope.errors import UsageError
from lenscope.store.base import NodeLike, StoreBase
from lenscope.store.digests import FileDigest, digest_folder
from lenscope.store.node import Node
from lenscope.store.schema import checkpoint_files, nodes


class CheckpointsMixin(StoreBase):
    """The checkpoint half of the Store."""

    def checkpoint_dir(self, node: NodeLike) -> Path:
        """Where `node`'s checkpoint belongs: <root>/checkpoints/<name>/<nonce>/<seq> (not created)."""
        node = Node.coerce(node)
        with self.read() as connection:
            self._node_id(connection, node)
        return self.checkpoint_folder(node)

    def checkpoint_folder(self, node: Node) -> Path:
        """The same place computed from the address alone, without reading the store.

        What the processes of a multi-host job that do not write use: they must not look up a node
        that process 0 may not have committed yet.
        """
        return self.root / "checkpoints" / node.name / node.nonce / str(node.seq)

    def mark_checkpoint(self, node: NodeLike, path: Path | str, step: int | None = None) -> None:
        """Record that `node`'s checkpoint is at `path` (a training `step` optional) so queries find it.

        Call it once the checkpoint is committed: the size and SHA-256 of every file under `path` are
        recorded with the mark (in the same transaction), and restores and `lenscope fsck` check them.
        """
        if not isinstance(path, (str, Path)) or not str(path):
            raise UsageError(f"checkpoint path must be a non-empty str or Path, got {path!r}")
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            raise UsageError(f"checkpoint step must be an int or None, got {step!r}")
        self._check_writable("mark_checkpoint")
        path = Path(path).expanduser().absolute()
        stored = path.relative_to(self.root).as_posix() if path.is_relative_to(self.root) else str(path)
        digests = digest_folder(path)  # hashed before the transaction: the write lock is held briefly
        with self._write("mark_checkpoint") as connection:
            node_id = self._node_id(connection, node)
            connection.execute(
                update(nodes).where(nodes.c.id == node_id).values(checkpoint=stored, checkpoint_step=step)
            )
            self._record_files(connection, node_id, digests)

    def record_checkpoint_digests(self, node: NodeLike) -> list[FileDigest]:
        """Record the digests of `node`'s checkpoint files as they are now (for checkpoints marked without them)."""
        path = self.checkpoint(node)
        if path is None:
            raise UsageError(f"node {node} has no checkpoint to record digests of")
        digests = digest_folder(path)
        with self._write("record_checkpoint_digests") as connection:
            self._record_files(connection, self._node_id(connection, node), digests)
        return digests

    @staticmethod
    def _record_files(connection: Connection, node_id: int, digests: list[FileDigest]) -> None:
        connection.execute(delete(checkpoint_files).where(checkpoint_files.c.node_id == node_id))
        if digests:
            connection.execute(insert(checkpoint_files), [
                dict(node_id=node_id, path=d.path, size=d.size, sha256=d.sha256) for d in digests])

    def checkpoint(self, node: NodeLike) -> Path | None:
        """The checkpoint folder marked on `node`, or None."""
        with self.read() as connection:
            node_id = self._node_id(connection, node)
            stored = connection.execute(select(nodes.c.checkpoint).where(nodes.c.id == node_id)).scalar_one()
        return self.checkpoint_path(stored)

    def checkpoint_files(self, node: NodeLike) -> list[FileDigest]:
        """The files recorded when `node`'s checkpoint was marked, by path; [] when none were recorded."""
        with self.read() as connection:
            node_id = self._node_id(connection, node)
            rows = connection.execute(
                select(checkpoint_files.c.path, checkpoint_files.c.size, checkpoint_files.c.sha256)
                .where(checkpoint_files.c.node_id == node_id).order_by(checkpoint_files.c.path))
            return [FileDigest(row.path, row.size, row.sha256) for row in rows]
