"""Prefix reuse (capture/staged.py): patched runs that start at the patched block and position equal the
whole patched forwards, fall back where they cannot, and do less work in one compiled program."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from analysis_probes import config
from conftest import xla_compilations
from flax import nnx

from lenscope.analysis import AnalysisBase
from lenscope.analysis.patch_sweeps import (
    logit_diff,
    position_sweep,
    set_position,
    sweep,
    zero_ablate,
)
from lenscope.capture.choose import backend_for
from lenscope.capture.patch import patched, record
from lenscope.capture.staged import Plan, plan, reused_forward, staged
from lenscope.examples.grokking import GrokTrainer
from lenscope.models import MLPClassifier, Transformer
from lenscope.models import equinox as eqx_models
from lenscope.models import nnx as nnx_models

SIZES = dict(vocab_size=11, seq_len=5, d_model=16, n_heads=2, d_head=8, d_mlp=32, n_layers=2)
CLEAN = jax.random.randint(jax.random.PRNGKey(0), (2, 5), 0, 11)
BAD = CLEAN.at[:, :3].set(jnp.array([1, 2, 3]))


def model(library: str):
    """The reference Transformer of one library, with random weights, ready to call."""
    if library == "linen":
        linen = Transformer(**SIZES, use_ln=True)
        return linen.bind({"params": linen.init(jax.random.PRNGKey(1), CLEAN)["params"]})
    if library == "nnx":
        return nnx_models.Transformer(**SIZES, use_ln=True, rngs=nnx.Rngs(1))
    return eqx_models.Transformer(**SIZES, use_ln=True, key=jax.random.PRNGKey(1))


def grid(net, reuse: bool, chunk: int | None = None, readout: int | None = None) -> jax.Array:
    """Every block output x position patched from the clean run into the corrupted one: the logit difference."""
    backend, paths = backend_for(net), list(net.block_paths())
    paths += [f"{paths[0]}/mlp"]  # a module inside a block: the run starts at its block
    _, acts = record(lambda t: net(t), (CLEAN,), paths, backend=backend)

    def score(patch):
        if reuse:
            out = reused_forward(net, (BAD,), patch, readout=readout, backend=backend)
        else:
            out = patched(lambda t: net(t), (BAD,), patch, backend=backend)
        return logit_diff(out if out.ndim == 2 else out[:, -1], CLEAN[:, 0], BAD[:, 0])

    if reuse:
        return position_sweep(score, paths, acts, CLEAN.shape[1], chunk)
    return sweep(score, paths, lambda p, i: set_position(acts[p], i), CLEAN.shape[1])


def compiled(fn):
    """The program of fn() compiled once, and XLA's count of its floating-point operations."""
    program = jax.jit(fn).lower().compile()
    return program, program.cost_analysis()["flops"]


@pytest.mark.parametrize("library", ["linen", "nnx", "equinox"])
def test_reused_sweep_equals_the_whole_forward_sweep_with_less_work(library):
    net = model(library)
    whole, whole_flops = compiled(lambda: grid(net, False))
    full = whole()
    # starting at the patched block: the same operations on the same values, bit for bit
    by_block = jax.jit(lambda: grid(net, True))()
    assert by_block.dtype == full.dtype == jnp.float32
    np.testing.assert_array_equal(by_block, full)
    # also skipping the positions before the patched one and computing only the read position: XLA sums the
    # smaller products in another order, so equal to float32 rounding of the logits
    program, flops = compiled(lambda: grid(net, True, chunk=3, readout=-1))
    by_position = program()
    assert by_position.dtype == full.dtype
    np.testing.assert_allclose(by_position, full, rtol=0, atol=2e-6 * float(jnp.max(jnp.abs(full))))
    assert float(jnp.max(jnp.abs(full))) > 0  # the grid is not trivially zero
    assert flops < 0.75 * whole_flops, (flops, whole_flops)  # XLA's count of the program: a count, not a timing


def test_plan_starts_at_the_patched_block_and_position_and_refuses_outside_the_blocks():
    blocks = ["blocks_0", "blocks_1", "blocks_2"]
    row = set_position(jnp.zeros((2, 5, 4)), 3, first=2)
    assert plan(blocks, {"blocks_1": zero_ablate}) == Plan(start=2, entry="blocks_1", first=0)
    assert plan(blocks, {"blocks_1/mlp": row, "blocks_2": row}) == Plan(start=1, entry=None, first=2)
    assert plan(blocks, {"blocks_1/attn/out": zero_ablate}, on="inputs") == Plan(1, None, 0)
    assert plan(blocks, {"embed": zero_ablate}) is None  # before every block: the whole forward
    assert plan(blocks, {"embed": row, "blocks_2": row}) is None
    assert plan(blocks, {"blocks_10": zero_ablate}) is None  # not a block (a prefix of a name is not enough)
    assert staged(MLPClassifier(features=(4,), n_out=2)) is None  # no block structure


def test_a_patch_reuse_cannot_serve_runs_the_whole_forward():
    net = model("linen")
    backend = backend_for(net)
    embed_patch = {"embed": lambda e: e * 0.5}
    whole = jax.jit(lambda: patched(lambda t: net(t), (BAD,), embed_patch, backend=backend))()
    np.testing.assert_array_equal(jax.jit(lambda: reused_forward(net, (BAD,), embed_patch, backend=backend))(),
                                  whole)
    # a patch of the last block's MLP with a read position: every position of the output stays available
    mlp = {"blocks_1/mlp": zero_ablate}
    whole = jax.jit(lambda: patched(lambda t: net(t), (BAD,), mlp, backend=backend))()
    read = jax.jit(lambda: reused_forward(net, (BAD,), mlp, readout=2, backend=backend))()
    np.testing.assert_allclose(read, whole[:, 2], rtol=0, atol=1e-6)
    # a row patch after the read position cannot reach it: the unpatched output there
    late = {"blocks_0": set_position(jnp.ones((2, 5, 16)), 4, first=4)}
    np.testing.assert_array_equal(jax.jit(lambda: reused_forward(net, (BAD,), late, readout=3, backend=backend))(),
                                  jax.jit(lambda: net(BAD)[:, 3])())


class PatchedTwice(AnalysisBase, GrokTrainer):
    """A position sweep inside analyze() with prefix reuse (self.forward), and the same with whole forwards."""

    NAME = "patched_twice"

    def select(self, paths):
        return ""

    def analyze(self, layer, inputs):
        x = self.current_batch["inputs"]
        block = self.block_path(0)
        _, clean = self.activations(x, [block, f"{block}/mlp"])
        bad = jnp.roll(x, 1, axis=0)
        fn, args = self._model_fn(bad)
        score = lambda out: jnp.mean(out[:, -1, 0])  # noqa: E731
        reused = position_sweep(lambda patch: score(self.forward(bad, patch)), [block], clean, x.shape[1], 1)
        whole = sweep(lambda patch: score(patched(fn, args, patch)), [block],
                      lambda p, i: set_position(clean[p], i), x.shape[1])
        packed = self.position_rows(bad, clean, -1, lambda logits: jnp.mean(logits[:, 0]))  # capture.packed
        return {"reused": reused, "whole": whole, "packed": packed[block], "served": jnp.asarray(len(packed))}


def test_prefix_reuse_and_packing_inside_an_analysis_compile_once(tmp_path):
    analysis = PatchedTwice(config(tmp_path), store=tmp_path / "runs")
    analysis.setup()
    with xla_compilations() as compiled:
        results = analysis.compute()
        again = analysis.compute()
    assert [name for name, _ in compiled if name.startswith("capture")] == ["capture_analyze"]
    assert analysis.compilations == 1
    np.testing.assert_allclose(results["reused"], results["whole"], rtol=0, atol=1e-5)
    np.testing.assert_array_equal(again["reused"], results["reused"])
    assert int(results["served"]) == 1  # the block's output packed; its MLP is left to the patch-by-patch sweep
    np.testing.assert_allclose(results["packed"], results["whole"][0], rtol=0, atol=1e-5)
    analysis.cleanup()


def test_equinox_method_called_as_root_keeps_the_module_paths():
    net = model("equinox")
    assert isinstance(net.from_block, eqx.Module)  # Equinox binds methods as modules: the reason for the rule
    out, acts = record(lambda r: net.from_block(r, 1), (net.residuals(BAD)[1][1],), ["blocks/1/mlp"],
                       backend=backend_for(net))
    np.testing.assert_allclose(out, net(BAD), rtol=0, atol=1e-5)
    assert acts["blocks/1/mlp"].shape == (2, 5, 16)


GPT2_LIKE = dict(family="gpt2", norm="layernorm", norm_eps=1e-5, n_positions=8, gated=False, n_kv_heads=2,
                 activation="gelu_tanh", qkv_bias=True, tied=True)
LLAMA_LIKE = dict(family="llama", n_kv_heads=1, rope_freqs=((1.0, 0.1, 0.01, 0.001),) * 2, qk_norm=True,
                  windows=(3, None))  # rotary positions, grouped keys and values, a sliding window


@pytest.mark.parametrize("family", [GPT2_LIKE, LLAMA_LIKE], ids=["gpt2", "llama"])
def test_the_pretrained_decoder_offers_the_block_structure(family):
    from lenscope.models.pretrained.config import DecoderConfig
    from lenscope.models.pretrained.decoder import Decoder

    cfg = DecoderConfig(vocab_size=11, d_model=16, n_layers=2, n_heads=2, d_head=8, d_mlp=32,
                        attn_scale=8 ** -0.5, **family)
    net = Decoder(cfg, key=jax.random.PRNGKey(2))
    assert staged(net) is net and net.staged_on(BAD) and not net.staged_on(BAD, jnp.ones_like(BAD))
    full = jax.jit(lambda: grid(net, False))()
    by_block, block_flops = compiled(lambda: grid(net, True))  # compiled once: its values and its count
    np.testing.assert_array_equal(by_block(), full)
    # the positions before a chunk's first from the unpatched run's keys and values (its KV cache), the
    # later ones and the read position computed: equal to float32 rounding (the cache's zero slots are masked)
    program, flops = compiled(lambda: grid(net, True, chunk=3, readout=-1))
    np.testing.assert_allclose(program(), full, rtol=0, atol=2e-6 * float(jnp.max(jnp.abs(full))))
    assert flops < block_flops  # XLA's count: fewer operations than from the block
