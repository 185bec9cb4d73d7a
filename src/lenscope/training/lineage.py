"""The job's live node: cheap in-memory ticks, written to the store only when something attaches."""

from __future__ import annotations

import contextlib
import enum
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from ..files import atomic_path
from ..store import Node, Store
from ..store.leases import Lease, acquire
from ..store.lineage_heads import node_state
from .interrupts import describe, shielded

Guard = Callable[[], contextlib.AbstractContextManager]


class Lineage:
    """Owns the current node of one job; only the writer process touches the store.

    `tick()` is in memory; `flush()` writes every node ticked since the last write in
    one transaction, so each seq exists with its parent edge, without a write per step.
    An owned lineage holds its lease (store/leases.py) until `close()`; every write runs
    under `guard` (by default: held from SIGINT/SIGTERM until it completes).
    """

    def __init__(self, store: Store, node: Node, *, writer: bool, owner: bool = True, adopt: bool = False,
                 config: dict | None = None, lease: Lease | None = None,
                 prior: tuple[str, str | None] | None = None) -> None:
        self.adopt = adopt
        self.store = store
        self.node = node
        self.writer = writer
        self.owner = owner
        self.config = config  # what the nodes this job produces record (None: their parent's)
        self.ended: tuple[str, str | None] | None = None  # (status, error), once finish() has written it
        self.guard: Guard = shielded
        self._stored = node
        self._start = node
        self._lease = lease
        self._prior = prior  # a resumed node's (status, error) before this job took it

    @classmethod
    def start(cls, store: Store, name: str, parents: tuple = (), config: dict | None = None,
              *, writer: bool = True) -> Lineage:
        """A new lineage at seq 0 (with `parents` when branching), leased to this job; every process adopts it."""
        node, lease = None, None
        if writer:
            with shielded():
                node = store.new_node(name, parents=parents, config=config)
                lease = acquire(store, node)
        if jax.process_count() > 1:
            node = Node(Node.clean_name(name), _broadcast_nonce(node), 0)
        return cls(store, node, writer=writer, lease=lease)

    @classmethod
    def resume(cls, store: Store, base: Node, *, config: dict | None = None, writer: bool = True) -> Lineage:
        """Continue the lineage of `base`, attaching to that exact node: take its lease, mark it running.

        The nodes it goes on to produce record `config`, the config this run was made with.
        """
        if not writer:
            return cls(store, base, writer=False, adopt=True)
        with shielded():
            lease = acquire(store, base)
            try:
                prior = node_state(store, base)
                store.set_status(base, "running")
            except BaseException:
                lease.release()
                raise
        return cls(store, base, writer=True, adopt=True, config=config, lease=lease, prior=prior)

    @classmethod
    def attach(cls, store: Store, node: Node, *, writer: bool = True) -> Lineage:
        """Attach to an existing node without owning it: no ticks, no status changes (analysis on a base)."""
        return cls(store, node, writer=writer, owner=False)

    def tick(self) -> Node:
        """Advance to the successor node (seq + 1) in memory."""
        if not self.owner:
            raise RuntimeError(f"node {self.node} is attached, not owned: only its owner ticks it")
        self.node = self.node.successor()
        return self.node

    def flush(self) -> Node:
        """Make sure the current node and every node before it exist in the store."""
        if self.writer and self._stored != self.node:
            with self.guard():
                self.store.tick(self._stored, count=self.node.seq - self._stored.seq, adopt=self.adopt,
                                config=self.config)
                self._stored = self.node
        return self.node

    def record(self, values: Mapping[str, Any]) -> None:
        """Record scalar values on the current node."""
        if self.writer and values:
            with self.guard():
                self.store.record(self.flush(), values)

    def put_artifact(self, name: str, filename: str, content: bytes, *, provenance: Mapping | None = None,
                     other_class: bool = False) -> None:
        """Attach a file's exact bytes to the current node (with what made it, when given)."""
        if self.writer:
            with self.guard():
                self.store.put_artifact(self.flush(), name, filename, content, provenance=provenance,
                                        other_class=other_class)

    def save(self, path: Path | str, name: str, content: bytes, *, provenance: Mapping | None = None,
             other_class: bool = False) -> Path:
        """Write `content` to the file `path` and attach the same bytes as artifact `name`: both, or neither.

        The file is written to a temporary sibling, the artifact stored, then the file renamed into
        place; a failure (or an interrupt, held until the pair is complete) leaves neither behind.
        """
        path = Path(path)
        if not self.writer:
            return path
        with self.guard(), atomic_path(path) as tmp:
            with open(tmp, "wb") as handle:
                handle.write(content)
                handle.flush()
                os.fsync(handle.fileno())
            self.put_artifact(name, path.name, content, provenance=provenance, other_class=other_class)
        return path

    def checkpoint_dir(self) -> Path:
        """Where the current node's checkpoint goes, the current node written first.

        Only the writer reads the store: every other process computes the same folder from the node
        it was given, so none looks up a row process 0 has not committed.
        """
        if self.writer:
            return self.store.checkpoint_dir(self.flush())
        return self.store.checkpoint_folder(self.node)

    def mark_checkpoint(self, node: Node, path: Path, step: int) -> None:
        """Mark a committed checkpoint on `node` (called from the checkpoint thread)."""
        if self.writer:
            self.store.mark_checkpoint(node, path, step=step)

    def finish(self, status: str, error: str | None = None, *, release: bool = False) -> None:
        """Mark the current node done or failed, once (only a node this job owns).

        A resumed node that never advanced (an evaluation) keeps the status it had, unless the job failed.
        With `release`, the lease is released in the same transaction as the status.
        """
        if not (self.writer and self.owner) or self.ended is not None:
            return
        if status == "done" and self.node == self._start and self._prior is not None and self._prior[0] != "running":
            status, error = self._prior
        with self.guard():
            self.store.set_status(self.flush(), status, error=error, lease=self._lease if release else None)
        self.ended = (status, error)

    def close(self, error: BaseException | None = None) -> None:
        """Finish the node if nothing did (failed with `error`, else done) and release the lease with it; idempotent.

        When the final status cannot be written (a full disk), the lease row stays and only the lock
        is dropped: the lineage is then stale, not `running` with no owner, so `--resume` takes it over.
        """
        try:
            if self.ended is None:
                self.finish("failed" if error is not None else "done", describe(error) if error is not None else None,
                            release=True)
        finally:
            if self._lease is not None:
                lease, self._lease = self._lease, None
                if self.ended is None and self.writer and self.owner:
                    lease.drop()
                else:
                    lease.release()


class Mode(enum.Enum):
    """How a job or an analysis takes the node it writes to."""

    NEW = "new"  # a new lineage at seq 0, a child of `base` when there is one (a branch)
    RESUME = "resume"  # continue `base`'s lineage: own it and mark it running
    ATTACH = "attach"  # write onto `base` without owning it: no new node, no ticks, no status change
    EXPORT = "export"  # a new, finished node in another store whose config names the source node `base`

    @classmethod
    def of(cls, base: Node | None, *, resume: bool = False, attach: bool = False) -> Mode:
        """The mode of `setup()`: without a base a new lineage; with one attach, resume, or branch."""
        if base is None:
            return cls.NEW
        return cls.ATTACH if attach else cls.RESUME if resume else cls.NEW


def open_lineage(store: Store, mode: Mode, base: Node | None = None, *, name: str = "",
                 config: dict | None = None, writer: bool = True, parents: tuple[Node, ...] = ()) -> Lineage:
    """The one decision of which node results are written to, for jobs, analyses, tandem files and output stores.

    A new lineage's parents are `base` followed by `parents` (a job that read several nodes descends from each).
    """
    if mode is Mode.RESUME:
        return Lineage.resume(store, base, config=config, writer=writer)
    if mode is Mode.ATTACH:
        return Lineage.attach(store, base, writer=writer)
    if mode is Mode.EXPORT:
        if not writer:  # only process 0 creates the node; the others never write
            return Lineage.attach(store, base, writer=False)
        node = store.new_node(name, config={"source": str(base), **(config or {})})
        store.set_status(node, "done")
        return Lineage.attach(store, node)
    return Lineage.start(store, name, ((base,) if base is not None else ()) + tuple(parents), config, writer=writer)


def _broadcast_nonce(node: Node | None) -> str:
    """Process 0's nonce, on every process of a multi-host job."""
    value = int(node.nonce, 16) if node is not None else 0
    return f"{int(multihost_utils.broadcast_one_to_all(np.int64(value))):06x}"
