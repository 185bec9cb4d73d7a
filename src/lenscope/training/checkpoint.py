"""Orbax checkpoint writes (asynchronous, marked on the node once committed) and partial restore."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ..errors import CheckpointError, JobError
from ..store.digests import FileDigest, differences
from .state import flat_paths, key_path

log = logging.getLogger("lenscope.checkpoint")
FSCK_HINT = "run `lenscope fsck` to check the whole store"
_unverified: set[Path] = set()  # checkpoints without digests already warned about (once per process)


def _orbax() -> Any:
    """orbax.checkpoint, imported when a checkpoint is first read or written: a run that does neither skips it."""
    import orbax.checkpoint  # lazy: a fifth of a second to import, and an analysis on initialized state never needs it
    return orbax.checkpoint


class CheckpointWriter:
    """Saves states asynchronously; `on_commit(path, step)` runs once a save is durable."""

    def __init__(self) -> None:
        self._checkpointer: Any = None  # an Orbax StandardCheckpointer, made by the first save
        self._pending: threading.Thread | None = None
        self._error: BaseException | None = None

    def save(self, path: Path, state: Any, step: int, on_commit: Callable[[Path, int], None]) -> None:
        """Start writing `state` to `path`; the previous save is finished first."""
        self.wait()
        if self._checkpointer is None:
            self._checkpointer = _orbax().StandardCheckpointer()
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
            if self._checkpointer is not None:
                self._checkpointer.close()


def read_checkpoint(path: Path | str, recorded: Sequence[FileDigest] | None = None, *, target: Any = None) -> Any:
    """The raw saved tree at `path`; a clear error if it is missing, damaged or unreadable.

    `recorded` (from `store.checkpoint_files(node)`) are the digests taken when the checkpoint was
    committed: every file is checked against them first. An empty record (a checkpoint marked before
    digests existed) restores unchecked, with a warning; None skips the check.

    `target` (an abstract state: ShapeDtypeStruct leaves with shardings) restores each saved leaf that
    matches a target leaf (same path, shape and dtype) directly into that leaf's sharding on the
    current mesh, whatever mesh or process count saved it: every process reads only its shards.
    Other leaves (none without a target) come back as host arrays, for surgery to map or refuse.
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if recorded is not None:
        verify_checkpoint(path, recorded)
    try:
        with _orbax().StandardCheckpointer() as checkpointer:
            # Never the saved shardings: they name the saving job's devices, which this topology may lack.
            saved = checkpointer.metadata(path.absolute()).item_metadata
            if saved is None:
                raise CheckpointError(f"checkpoint {path} is unreadable: its _METADATA (the saved tree's "
                                      f"description) is missing or empty; {FSCK_HINT}")
            return checkpointer.restore(path.absolute(), _restore_target(saved.tree, target))
    except CheckpointError:
        raise
    except Exception as err:  # Orbax raises many types for a damaged directory
        raise CheckpointError(f"checkpoint {path} is unreadable ({type(err).__name__}: {err}); {FSCK_HINT}") from err


def _restore_target(saved: Any, target: Any) -> Any:
    """Per saved leaf: the matching target leaf's spec (restored sharded), else an empty host array (NumPy)."""
    wanted = flat_paths(target) if target is not None else {}

    def leaf_target(path: tuple, leaf: Any) -> Any:
        want = wanted.get(key_path(path))
        if getattr(want, "sharding", None) is not None and _kind(want) == _kind(leaf):
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=want.sharding)
        return np.empty(leaf.shape, leaf.dtype)

    return jax.tree_util.tree_map_with_path(leaf_target, saved)


def verify_checkpoint(path: Path, recorded: Sequence[FileDigest]) -> None:
    """Refuse a checkpoint whose files differ from the digests recorded at commit (naming the first damaged file)."""
    if not recorded:
        if path not in _unverified:
            _unverified.add(path)
            log.warning("checkpoint %s has no recorded digests (marked before lenscope recorded them): restored "
                        "unchecked; `lenscope fsck --repair` records them", path)
        return
    problems = differences(path, recorded)
    if problems:
        more = f" (and {len(problems) - 1} more damaged files)" if len(problems) > 1 else ""
        raise CheckpointError(f"checkpoint {path} is damaged: {problems[0]}{more}; {FSCK_HINT}")


_SHOWN = 5  # mismatches named in one error


def restore_tree(target: Any, saved: Any, *, may_miss: Callable[[str], bool] | None = None,
                 may_extra: bool = False) -> tuple[Any, list[str]]:
    """Fill `target` with `saved`'s leaves, matched by path; returns the tree and the paths left initialized.

    Strict unless told otherwise: a target leaf the checkpoint lacks (unless `may_miss(path)`), a checkpoint
    leaf the target lacks (unless `may_extra`) or a leaf of another shape or dtype is one error naming the
    first mismatches (a CheckpointError), raised before anything is placed.
    """
    found = flat_paths(saved)
    wanted = flat_paths(target)
    missing = [path for path in wanted if path not in found]
    refused = [path for path in missing if may_miss is None or not may_miss(path)]
    extra = [] if may_extra else [path for path in found if path not in wanted]
    wrong = [path for path, leaf in wanted.items() if path in found and _kind(found[path]) != _kind(leaf)]
    if refused or extra or wrong:
        raise CheckpointError(_mismatch(refused, extra, wrong, found, wanted))

    def take(path: tuple, leaf: Any) -> Any:
        name = key_path(path)
        if name not in found:
            return leaf
        value, sharding = found[name], getattr(leaf, "sharding", None)
        if sharding is None:
            return np.asarray(value)
        if isinstance(value, jax.Array) and value.sharding.is_equivalent_to(sharding, value.ndim):
            return value  # restored in place: never gathered
        host = np.asarray(value)  # a host leaf (read for surgery); every process holds all of it
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree_util.tree_map_with_path(take, target), missing


def partial_restore(target: Any, saved: Any) -> tuple[Any, list[str]]:
    """`restore_tree` that keeps every leaf the checkpoint lacks initialized and ignores leaves the model lacks.

    For surgery on a changed model; shape or dtype mismatches are still errors.
    """
    return restore_tree(target, saved, may_miss=lambda path: True, may_extra=True)


def _kind(leaf: Any) -> tuple[tuple[int, ...], np.dtype]:
    return tuple(np.shape(leaf)), np.dtype(leaf.dtype if hasattr(leaf, "dtype") else np.asarray(leaf).dtype)


def _listed(paths: list[str]) -> str:
    more = f" and {len(paths) - _SHOWN} more" if len(paths) > _SHOWN else ""
    return ", ".join(repr(p) for p in paths[:_SHOWN]) + more


def _mismatch(missing: list[str], extra: list[str], wrong: list[str], found: dict, wanted: dict) -> str:
    parts = []
    if missing:
        parts.append(f"the checkpoint lacks {len(missing)} leaves of the model: {_listed(missing)}")
    if extra:
        parts.append(f"it has {len(extra)} leaves the model lacks: {_listed(extra)}")
    for path in wrong[:_SHOWN]:
        (have, have_t), (want, want_t) = _kind(found[path]), _kind(wanted[path])
        parts.append(f"leaf {path!r} has shape {have} dtype {have_t}, the model expects shape {want} dtype {want_t}")
    return ("checkpoint does not match the model: " + "; ".join(parts)
            + ". Is it a checkpoint of this job? To restore a changed model on purpose, override surgery() "
            "(e.g. partial_restore, or restore_tree with may_miss=...)")
