"""Packed position sweeps: every (block output, position) patched run of a causal model, as rows of one array.

A patched run at (block l, position p) differs from the unpatched run only at positions p.. in the blocks
after l (capture.staged), and a read at position `a` needs positions p..a only: a - p + 1 rows, with the
unpatched stream before p as attention context. Those lengths differ from run to run, which one jitted
array cannot hold, but the runs of p and a - p together fill a + 2 rows exactly. So the sweep packs each
such pair into a row group, stacks the groups of every patched block, and runs them through the model
block by block (the runs of block l join the stack at block l + 1), each row attending under a static mask
to the context before its run's first position and to its own run's earlier rows; the last block computes
only the read rows. That is the blocks' work each run needs, and one call of each block for all of them.

Every row computes what its run's whole forward computes at that position (the same operations on the same
values; XLA sums some of the products in another order, so equal to float rounding). A model without
`block_step`, one whose blocks take no context, or a path that is not a block's output: None, and the
caller runs its sweep one patched forward at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from .staged import Staged

__all__ = ["Layout", "Stepped", "layout", "packed_position_sweep"]

READ_ELEMENTS = 1 << 22  # numbers of read logits at once (16 MiB of float32): runs are unembedded in such chunks


@runtime_checkable
class Stepped(Protocol):
    """A Staged model that runs one block on rows that attend to context rows under a given mask."""

    def block_step(self, index: int, x: jax.Array, mask: jax.Array,
                   context: jax.Array | tuple[jax.Array, ...] | None, positions: jax.Array,
                   keyed: int | None = None) -> jax.Array:
        """Block `index` on x [..., rows, d]: row i attends to context [..., c, d] and x's first `keyed` rows
        (all: None) where mask [..., rows, c + keyed] holds (context first); a context whose leading axes are
        1 where x's are not is shared by those rows (its keys and values computed once); a tuple holds parts,
        in order. positions [..., c + rows]: the context's positions in the sequence, then x's rows' (rotary
        embeddings, windows); the rows after the first `keyed` give no keys (theirs are in the context)."""
        ...


@dataclass(frozen=True)
class Layout:
    """The row groups for read position `a`: group g holds the runs of positions g and a - g.

    pos, start, run [groups, a + 2]: each row's position, its run's first (patched) position and its run (0 or 1);
    ends [groups, 2]: each run's row at the read position; firsts [groups, 2]: each run's first row;
    mask [groups, a + 2, a + a + 2]: context positions 0..a-1, then rows.
    """

    a: int
    pos: np.ndarray
    start: np.ndarray
    run: np.ndarray
    ends: np.ndarray
    firsts: np.ndarray
    mask: np.ndarray

    @property
    def keys(self) -> np.ndarray:
        """[groups, a + a + 2]: the position of each key along mask's last axis (context 0..a-1, then rows)."""
        return np.concatenate([np.broadcast_to(np.arange(self.a), (len(self.pos), self.a)), self.pos], axis=1)

    def cell(self, p: int) -> tuple[int, int]:
        """(group, run in it) of the run patched at position p <= a."""
        return (p, 0) if p <= self.a - p else (self.a - p, 1)

    def others(self) -> np.ndarray:
        """[groups, a]: each group's rows but its runs' first rows (those a run's first block leaves unpatched)."""
        keep = np.ones(self.pos.shape, bool)
        keep[np.arange(len(self.pos))[:, None], self.firsts] = False
        return np.nonzero(keep)[1].reshape(len(self.pos), -1)

    def joining(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For a run's first block: the rows [groups, 2 + k] that block computes (each run's first row, then
        `rows` [groups, k]), their mask [groups, 2 + k, a + 1 + 2] over the unpatched stream at positions
        0..a (every row but the run's first is still unpatched there) and the two first rows, and the positions
        [groups, a + 1 + 2 + k] of that stream, then of the rows (block_step's `positions`)."""
        groups = np.arange(len(self.pos))[:, None]
        order = np.concatenate([self.firsts, rows], axis=1)
        pos, start, run = self.pos[groups, order], self.start[groups, order], self.run[groups, order]
        keys = np.arange(self.a + 1)[None, None, :]
        unpatched = (keys <= pos[..., None]) & (keys != start[..., None])
        own = run[..., None] == np.arange(2)[None, None, :]
        stream = np.broadcast_to(np.arange(self.a + 1), (len(order), self.a + 1))
        return order, np.concatenate([unpatched, own], axis=-1), np.concatenate([stream, pos], axis=-1)


def layout(a: int) -> Layout:
    """The packing of the runs of positions 0..a (read at a) into a // 2 + 1 groups of a + 2 rows."""
    groups, rows = a // 2 + 1, a + 2
    pos, start, run = (np.zeros((groups, rows), np.int32) for _ in range(3))
    for g in range(groups):
        n = a - g + 1  # the rows of run g; run a - g fills the rest
        pos[g] = np.concatenate([np.arange(g, a + 1), np.arange(a - g, a + 1)])
        start[g, :n], start[g, n:], run[g, n:] = g, a - g, 1
    own = (run[:, :, None] == run[:, None, :]) & (pos[:, None, :] <= pos[:, :, None])
    context = np.arange(a)[None, None, :] < start[:, :, None]
    ends = np.stack([a - np.arange(groups), np.full(groups, rows - 1)], axis=1)
    firsts = np.stack([np.zeros(groups, np.int32), a - np.arange(groups) + 1], axis=1)
    return Layout(a, pos, start, run, ends, firsts, np.concatenate([context, own], axis=-1))


def packable(model: Any, args: tuple, paths: Sequence[str]) -> bool:
    """Whether packed_position_sweep serves these paths of this model on these arguments."""
    if not (isinstance(model, Staged) and isinstance(model, Stepped) and model.skips_positions):
        return False
    blocks = list(model.block_paths())
    return bool(paths) and all(path in blocks for path in paths) and model.staged_on(*args)


def packed_position_sweep(model: Any, args: tuple, sources: Mapping[str, jax.Array], readout: int,
                          score: Callable[[jax.Array], jax.Array]) -> jax.Array | None:
    """[len(sources), seq]: score(output at `readout`) with block output `path` at position i taken from
    sources[path] (set_position), for each path and i; None when the model or a path does not allow it."""
    paths = list(sources)
    if not packable(model, args, paths):
        return None
    output, stream = model.residuals(*args)
    if not isinstance(output, jax.Array) or output.ndim < 3:
        return None
    seq, blocks = stream[0].shape[1], list(model.block_paths())
    lay = layout(readout % seq)
    rows = _run(model, stream, lay, {i: blocks.index(path) for i, path in enumerate(paths)},
                [sources[path] for path in paths])  # [batch, paths, a + 1, d] in the paths' order
    batch, n, cells, d = rows.shape
    flat = jnp.moveaxis(rows.reshape(batch, n * cells, 1, d), 1, 0)  # [runs, batch, 1, d]
    size = max(1, READ_ELEMENTS // max(1, batch * int(output.shape[-1])))
    scores = jax.lax.map(lambda r: score(model.from_block(r, len(blocks))[:, 0]), flat, batch_size=size)
    grid = scores.reshape(n, cells)
    if cells < seq:  # a patch after the read position cannot reach it: the unpatched score
        grid = jnp.concatenate([grid, jnp.broadcast_to(score(output[:, lay.a]), (n, seq - cells))], axis=1)
    return grid


def _run(model: Any, stream: Sequence[jax.Array], lay: Layout, block_of: Mapping[int, int],
         sources: Sequence[jax.Array]) -> jax.Array:
    """The read rows [batch, paths, a + 1, d] of every path's patched runs, block by block."""
    pos, patched = jnp.asarray(lay.pos), jnp.asarray(lay.pos == lay.start)[None, :, :, None]
    groups = np.arange(len(lay.pos))[:, None]

    def entering(i: int) -> jax.Array:  # path i's runs: the stream after its block, patched at each run's start
        return jnp.where(patched, sources[i][:, pos], stream[block_of[i] + 1][:, pos])  # [batch, groups, rows, d]

    n_blocks, state, order = len(stream) - 1, None, []
    for j in range(n_blocks):
        last, outs, now = j == n_blocks - 1, [], []
        if state is not None:
            outs.append(_continue(model, j, state, stream[j], lay, last))
            now += order
        new = [i for i in block_of if block_of[i] == j - 1]
        if new:
            outs.append(_join(model, j, jnp.stack([entering(i) for i in new], axis=1), stream[j], lay, last))
            now += new
        if outs:
            state, order = jnp.concatenate(outs, axis=1) if len(outs) > 1 else outs[0], now
    ended = [i for i in block_of if block_of[i] == n_blocks - 1]  # the last block's output: no block to run
    if ended:
        joined = jnp.stack([entering(i)[:, groups, lay.ends] for i in ended], axis=1)
        state, order = (joined if state is None else jnp.concatenate([state, joined], axis=1)), order + ended
    cells = [lay.cell(p) for p in range(lay.a + 1)]
    read = state[:, :, [g for g, _ in cells], [r for _, r in cells]]  # [batch, paths in order, a + 1, d]
    return read[:, np.argsort(order)]


def _continue(model: Any, j: int, state: jax.Array, stream: jax.Array, lay: Layout, last: bool) -> jax.Array:
    """Block j on runs that started before it: every row [batch, paths, groups, rows, d] attends to the shared
    unpatched context before its run and to its run's rows; the last block computes only the read rows."""
    context = stream[:, None, None, :lay.a] if lay.a else None  # [batch, 1, 1, a, d]: shared by every run's rows
    if not last:
        return model.block_step(j, state, jnp.asarray(lay.mask)[:, None], context, jnp.asarray(lay.keys))
    groups = np.arange(len(lay.pos))[:, None]
    mask = np.concatenate([lay.mask[groups, lay.ends], np.zeros((*lay.ends.shape, 2), bool)], axis=-1)
    positions = np.concatenate([lay.keys, lay.pos[groups, lay.ends]], axis=-1)  # the context's, then the read rows'
    return model.block_step(j, state[:, :, groups, lay.ends], jnp.asarray(mask)[:, None],
                            state if context is None else (context, state), jnp.asarray(positions))


def _join(model: Any, j: int, entering: jax.Array, stream: jax.Array, lay: Layout, last: bool) -> jax.Array:
    """Block j, the first after the patched block, on its runs [batch, paths, groups, rows, d]: only each run's
    first row differs from the unpatched run, so the others' keys and values are the unpatched stream's
    (projected once, shared); the rows returned are every row, or the read rows in the last block."""
    groups = np.arange(len(lay.pos))[:, None]
    order, mask, positions = lay.joining(lay.ends if last else lay.others())
    context = stream[:, None, None, :lay.a + 1]  # [batch, 1, 1, a + 1, d]
    out = model.block_step(j, entering[:, :, groups, order], jnp.asarray(mask)[:, None], context,
                           jnp.asarray(positions), keyed=2)
    if last:
        return out[:, :, :, 2:]
    return out[:, :, groups, np.argsort(order, axis=1)]  # back to the layout's row order
