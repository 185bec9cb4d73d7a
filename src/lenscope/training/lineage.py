"""The job's live node: cheap in-memory ticks, written to the store only when something attaches."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from ..store import Node, Store


class Lineage:
    """Owns the current node of one job; only the writer process touches the store.

    `tick()` is in memory; `flush()` writes every node ticked since the last write in
    one transaction, so each seq exists with its parent edge, without a write per step.
    """

    def __init__(self, store: Store, node: Node, *, writer: bool, owner: bool = True, adopt: bool = False) -> None:
        self.adopt = adopt
        self.store = store
        self.node = node
        self.writer = writer
        self.owner = owner
        self._stored = node

    @classmethod
    def start(cls, store: Store, name: str, parents: tuple = (), config: dict | None = None,
              *, writer: bool = True) -> Lineage:
        """A new lineage at seq 0 (with `parents` when branching); process 0 creates it, every process adopts it."""
        node = store.new_node(name, parents=parents, config=config) if writer else None
        if jax.process_count() > 1:
            node = Node(Node.clean_name(name), _broadcast_nonce(node), 0)
        return cls(store, node, writer=writer)

    @classmethod
    def resume(cls, store: Store, base: Node, *, writer: bool = True) -> Lineage:
        """Continue the lineage of `base`, attaching to that exact node."""
        if writer:
            store.set_status(base, "running")
        return cls(store, base, writer=writer, adopt=True)

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
            self.store.tick(self._stored, count=self.node.seq - self._stored.seq, adopt=self.adopt)
            self._stored = self.node
        return self.node

    def record(self, values: Mapping[str, Any]) -> None:
        """Record scalar values on the current node."""
        if self.writer and values:
            self.store.record(self.flush(), values)

    def put_artifact(self, name: str, filename: str, content: bytes) -> None:
        """Attach a file's exact bytes to the current node."""
        if self.writer:
            self.store.put_artifact(self.flush(), name, filename, content)

    def checkpoint_dir(self) -> Path:
        """Where the current node's checkpoint goes."""
        return self.store.checkpoint_dir(self.node)

    def mark_checkpoint(self, node: Node, path: Path, step: int) -> None:
        """Mark a committed checkpoint on `node` (called from the checkpoint thread)."""
        if self.writer:
            self.store.mark_checkpoint(node, path, step=step)

    def finish(self, status: str, error: str | None = None) -> None:
        """Mark the current node done or failed (only a node this job owns)."""
        if self.writer and self.owner:
            self.store.set_status(self.flush(), status, error=error)


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
                 config: dict | None = None, writer: bool = True) -> Lineage:
    """The one decision of which node results are written to, for jobs, analyses, tandem files and output stores."""
    if mode is Mode.RESUME:
        return Lineage.resume(store, base, writer=writer)
    if mode is Mode.ATTACH:
        return Lineage.attach(store, base, writer=writer)
    if mode is Mode.EXPORT:
        if not writer:  # only process 0 creates the node; the others never write
            return Lineage.attach(store, base, writer=False)
        node = store.new_node(name, config={"source": str(base), **(config or {})})
        store.set_status(node, "done")
        return Lineage.attach(store, node)
    return Lineage.start(store, name, (base,) if base is not None else (), config, writer=writer)


def _broadcast_nonce(node: Node | None) -> str:
    """Process 0's nonce, on every process of a multi-host job."""
    value = int(node.nonce, 16) if node is not None else 0
    return f"{int(multihost_utils.broadcast_one_to_all(np.int64(value))):06x}"
