"""Prefix reuse: a patched forward of a block-structured model that starts where the patch first acts.

A patch inside block `l` cannot change the residual stream entering block `l`, so the patched forward may
start there, from the unpatched run's stream, and skip blocks `0..l-1` (TransformerLens's start_at_layer).
A patch of a whole block's output starts after that block. Under a causal mask, a patch that changes only
positions from `first` on (a `RowPatch`) cannot change the earlier positions either: the run then computes
only positions `first..`, with the earlier positions' stream as attention context, and the output's earlier
positions are the unpatched run's. Both are exact: the same operations on the same values, fewer of them.

Inside one compiled program the unpatched run is the same expression for every patch of a sweep, so XLA
computes it once. Anything else (a patch outside the blocks, a model without the structure) runs the whole
patched forward (`capture.patch.patched`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp

from .backend import CaptureBackend
from .patch import Patch, check_patch, patched

__all__ = ["Plan", "RowPatch", "Staged", "plan", "read", "reused_forward", "staged"]


@runtime_checkable
class Staged(Protocol):
    """A causal decoder made of blocks, whose forward can be run in pieces (every reference Transformer)."""

    skips_positions: bool  # from_block takes `context`, so a causal patch skips the positions before it

    def block_paths(self) -> Sequence[str]:
        """The blocks' module paths, in forward order."""
        ...

    def staged_on(self, *args: Any) -> bool:
        """Whether the forward on these arguments can run in pieces (else the whole patched forward runs)."""
        ...

    def residuals(self, *args: Any) -> tuple[Any, Sequence[jax.Array]]:
        """(the forward's output, the residual stream [batch, seq, d] entering each block and after the last)."""
        ...

    def prefix(self, stream: Sequence[jax.Array], start: int, first: int) -> Sequence[Any]:
        """What blocks start.. need of the unpatched run's positions 0..first-1 (the stream there, or its keys
        and values): from_block's `context`, computed outside the patched run."""
        ...

    def from_block(self, resid: jax.Array, start: int, context: Sequence[Any] | None = None,
                   readout: int | None = None) -> Any:
        """The output from `resid`, the stream entering block `start` (0..n_blocks); with `context` (prefix()'s
        for some `first`), resid holds positions first.. only; with `readout` (an index into resid's
        positions), the output at that position only."""
        ...


@runtime_checkable
class RowPatch(Protocol):
    """An output patch that changes only positions (axis 1) from `first` on: `first` is static."""

    first: int

    def __call__(self, out: Any) -> Any: ...

    def from_row(self, first: int) -> Callable[[Any], Any]:
        """The same patch for an output that holds only positions `first..` (first <= self.first)."""
        ...


@dataclass(frozen=True)
class Plan:
    """Where a patched forward starts: block `start`, the stream entering it made by patching the output of
    block `entry` (None: the unpatched stream), positions from `first` on."""

    start: int
    entry: str | None
    first: int


def staged(model: Any) -> Staged | None:
    """The model as a Staged one, or None when it does not offer the block structure."""
    return model if isinstance(model, Staged) else None


def _block_of(path: str, blocks: Sequence[str]) -> int | None:
    for i, block in enumerate(blocks):
        if path == block or path.startswith(block + "/"):
            return i
    return None


def plan(blocks: Sequence[str], patch: Patch, on: str = "output") -> Plan | None:
    """Where the patched forward can start, or None when it must run whole (a path outside every block)."""
    where = {path: _block_of(path, blocks) for path in patch}
    if not where or None in where.values():
        return None
    start = min(where.values())  # type: ignore[type-var]
    in_start = [path for path, i in where.items() if i == start]
    entry = blocks[start] if on == "output" and in_start == [blocks[start]] else None
    rows = list(patch.values())
    first = min(fn.first for fn in rows) if on == "output" and all(isinstance(fn, RowPatch) for fn in rows) else 0
    return Plan(start + 1 if entry else start, entry, first)


def read(output: Any, readout: int | None) -> Any:
    """The output at position `readout` (axis 1) of a [batch, seq, ...] output; other outputs (and None) whole."""
    return output if readout is None or getattr(output, "ndim", 0) < 3 else output[:, readout]


def reused_forward(model: Staged, args: tuple, patch: Patch, *, on: str = "output", readout: int | None = None,
                   backend: CaptureBackend | None = None) -> Any:
    """model(*args) with `patch` applied (at position `readout` only, when given), run from where the patch
    first acts; the whole patched forward when it acts outside the blocks."""
    patch = check_patch(patch, on)
    where = plan(model.block_paths(), patch, on) if model.staged_on(*args) else None
    if where is None:
        full = patched(lambda *a: model(*a), args, patch, on=on, backend=backend)  # type: ignore[operator]
        return read(full, readout)
    output, stream = model.residuals(*args)
    seq = stream[0].shape[1]
    if readout is not None:
        readout %= seq
        if where.first > readout:  # a causal patch after the read position cannot reach it
            return output[:, readout]
    resid = stream[where.start]
    rest = dict(patch)
    if where.entry is not None:
        resid = rest.pop(where.entry)(resid)
    first = where.first if model.skips_positions and isinstance(output, jax.Array) and output.ndim >= 2 else 0
    context = None
    if first:
        context = list(model.prefix(stream, where.start, first))
        resid = resid[:, first:]
        rest = {path: fn.from_row(first) for path, fn in rest.items()}  # every one is a RowPatch (plan)
    # a model that skips positions also stops at the read position, which changes the patched outputs' lengths:
    # RowPatches outside the last block (which then computes one position) follow it; with any other patch
    # the whole output is computed and read afterwards
    last = model.block_paths()[-1]
    follow = all(isinstance(fn, RowPatch) and _block_of(path, [last]) is None for path, fn in rest.items())
    trim = readout if follow or not model.skips_positions else None
    at = None if trim is None else trim - first
    run = lambda r: model.from_block(r, where.start, context or None, at)  # noqa: E731
    out = patched(run, (resid,), rest, on=on, backend=backend, root=model) if rest else run(resid)
    if trim is not None:
        return out
    return read(jnp.concatenate([output[:, :first], out], axis=1) if first else out, readout)
