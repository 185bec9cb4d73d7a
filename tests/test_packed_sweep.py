"""Packed position sweeps (capture/packed.py): every block output x position patched at once equals the whole
patched forwards, the packing covers each run's positions exactly once, and anything else falls back (inside an
analysis, and compiled once: tests/test_prefix_reuse.py; the pretrained decoder: tests/test_packed_pretrained.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_prefix_reuse import BAD, CLEAN, model

from lenscope.analysis.patch_sweeps import logit_diff, set_position, sweep
from lenscope.capture.choose import backend_for
from lenscope.capture.packed import layout, packed_position_sweep
from lenscope.capture.patch import patched, record
from lenscope.models import MLPClassifier


def score(logits: jax.Array) -> jax.Array:
    return logit_diff(logits, CLEAN[:, 0], BAD[:, 0])


def whole(net, paths):
    """The reference grid: each (path, position) patch as its own whole forward, its whole output kept (any
    read position is scored from it); and the clean activations."""
    backend = backend_for(net)
    _, acts = record(lambda t: net(t), (CLEAN,), paths, backend=backend)
    run = lambda patch: patched(lambda t: net(t), (BAD,), patch, backend=backend)  # noqa: E731
    return acts, sweep(run, paths, lambda p, i: set_position(acts[p], i), CLEAN.shape[1])


@pytest.mark.parametrize("library", ["linen", "nnx", "equinox"])
def test_packed_sweep_equals_the_whole_forward_sweep(library):
    net = model(library)
    blocks = list(net.block_paths())
    clean, outputs = jax.jit(lambda: whole(net, blocks))()  # outputs [block, position, batch, seq, vocab]
    for paths, readout in ((blocks, -1), (blocks[::-1], 2), (blocks[1:], 0)):
        rows = outputs[np.array([blocks.index(path) for path in paths])]
        full = jax.vmap(jax.vmap(lambda out, readout=readout: score(out[:, readout])))(rows)
        acts = {path: clean[path] for path in paths}  # in the paths' order (jit returns a dict's keys sorted)
        packed = jax.jit(lambda acts=acts, readout=readout: packed_position_sweep(net, (BAD,), acts, readout,
                                                                                  score))()
        assert packed.dtype == full.dtype == jnp.float32 and packed.shape == (len(paths), CLEAN.shape[1])
        assert float(jnp.max(jnp.abs(full))) > 0  # the grid is not trivially zero
        # the same operations on the same values, but XLA sums the packed rows' products (projections over
        # more rows, attention over masked-out keys) in another order: equal to float32 rounding of the logits
        np.testing.assert_allclose(packed, full, rtol=0, atol=2e-6 * float(jnp.max(jnp.abs(full))))


@pytest.mark.parametrize("a", [0, 1, 4, 7])
def test_the_layout_holds_each_run_once_and_masks_what_causality_allows(a):
    lay = layout(a)
    runs = sorted({(g, int(s)) for g in range(len(lay.pos)) for s in lay.start[g]})
    assert sorted(s for _, s in runs) == list(range(a + 1))  # every position's run (the middle one twice)
    for g in range(len(lay.pos)):
        run = np.arange(a + 2) >= a - g + 1  # the group's first run, then its second
        for r in range(a + 2):
            context, own = lay.mask[g, r, :a], lay.mask[g, r, a:]
            assert context.sum() == lay.start[g, r]  # the unpatched positions before the run's first
            mates = (run == run[r]) & (lay.pos[g] <= lay.pos[g, r])
            np.testing.assert_array_equal(own, mates)  # its own run's rows up to its position
    for p in range(a + 1):
        g, run = lay.cell(p)
        assert lay.start[g, lay.ends[g, run]] == p and lay.pos[g, lay.ends[g, run]] == a


def test_what_packing_cannot_serve_is_left_to_the_caller():
    net = model("linen")
    acts = record(lambda t: net(t), (CLEAN,), ["blocks_0/mlp"], backend=backend_for(net))[1]
    assert packed_position_sweep(net, (BAD,), acts, -1, score) is None  # not a block's output
    mlp = MLPClassifier(features=(4,), n_out=2)
    assert packed_position_sweep(mlp, (jnp.ones((2, 3)),), {"layers_0": jnp.ones((2, 4))}, -1, score) is None


@pytest.mark.parametrize("a", [0, 1, 4, 7])
def test_a_runs_first_block_sees_each_earlier_position_once_through_the_unpatched_stream_or_its_first_row(a):
    lay = layout(a)
    for wanted in (lay.others(), lay.ends):
        order, mask, _ = lay.joining(wanted)
        for g, rows in enumerate(order):
            for r, row in enumerate(rows):
                seen = [k for k in range(a + 1) if mask[g, r, k]]  # unpatched positions
                seen += [int(lay.pos[g, lay.firsts[g, e]]) for e in range(2) if mask[g, r, a + 1 + e]]
                assert sorted(seen) == list(range(lay.pos[g, row] + 1))  # 0..its position, each once
                assert not mask[g, r, lay.start[g, row]] and mask[g, r, a + 1 + lay.run[g, row]]  # patched value
