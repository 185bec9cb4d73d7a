"""Orbax checkpoint writes (asynchronous, marked on the node once committed) and partial restore."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from ..errors import JobError
from .state import flat_paths, key_path

log = logging.getLogger("lenscope.checkpoint")


class CheckpointWriter:
    """Saves states asynchronously; `on_commit(path, step)` runs once a save is durable."""

    def __init__(self) -> None:
        self._checkpointer = ocp.StandardCheckpointer()
        self._pending: threading.Thread | None = None
        self._error: BaseException | None = None

    def save(self, path: Path, state: Any, step: int, on_commit: Callable[[Path, int], None]) -> None:
        """Start writing `state` to `path`; the previous save is finished first."""
        self.wait()
        self._checkpointer.save(Path(path).absolute(), state, force=True)

        def finish() -> None:
            try:
                self._checkpointer.wait_until_finished()
                on_commit(Path(path), step)
            except BaseException as err:  # surfaced by wait()
                self._error = err

        self._pending = threading.Thread(target=finish, name="lenscope-checkpoint", daemon=True)
        self._pending.start()

    def wait(self) -> None:
        """Block until the last save is committed and marked; re-raise its failure."""
        if self._pending is not None:
            self._pending.join()
            self._pending = None
        if self._error is not None:
            err, self._error = self._error, None
            raise JobError(f"checkpoint write failed: {err}") from err

    def close(self) -> None:
        """Finish pending writes and release the checkpointer."""
        try:
            self.wait()
        finally:
            self._checkpointer.close()


def read_checkpoint(path: Path | str) -> Any:
    """The raw saved tree (host arrays) at `path`; a clear error if it is missing or unreadable."""
    path = Path(path)
    if not path.is_dir():
        raise JobError(f"checkpoint {path} does not exist")
    try:
        with ocp.StandardCheckpointer() as checkpointer:
            # A NumPy target restores host arrays: the saved shardings name the saving job's devices,
            # which another topology (e.g. a multi-process analysis) does not have.
            saved = checkpointer.metadata(path.absolute()).item_metadata.tree
            target = jax.tree_util.tree_map(lambda leaf: np.empty(leaf.shape, leaf.dtype), saved)
            return checkpointer.restore(path.absolute(), target)
    except Exception as err:  # Orbax raises many types for a damaged directory
        raise JobError(f"checkpoint {path} is unreadable ({type(err).__name__}: {err})") from err


def partial_restore(target: Any, saved: Any) -> tuple[Any, list[str]]:
    """Fill `target` with the leaves found in `saved`; returns the tree and the paths left initialized.

    A leaf present in both with another shape or dtype is an error naming its path.
    """
    found = flat_paths(saved)
    missing: list[str] = []

    def take(path: tuple, leaf: Any) -> Any:
        name = key_path(path)
        if name not in found:
            missing.append(name)
            return leaf
        value = np.asarray(found[name])
        want_shape, want_dtype = np.shape(leaf), np.asarray(leaf).dtype if not hasattr(leaf, "dtype") else leaf.dtype
        if value.shape != want_shape or value.dtype != want_dtype:
            raise JobError(
                f"checkpoint leaf {name!r} has shape {value.shape} dtype {value.dtype}, "
                f"the model expects shape {want_shape} dtype {want_dtype}; override surgery() to convert it"
            )
        return jax.device_put(value, leaf.sharding) if isinstance(leaf, jax.Array) else value

    restored = jax.tree_util.tree_map_with_path(take, target)
    return restored, missing
