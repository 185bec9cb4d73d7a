"""Packed position sweeps on the pretrained decoder (capture/packed.py, Decoder.block_step): every block output x
position equals the staged and the whole-forward sweeps for learned positions (GPT-2), rotary positions with
grouped keys and values (Llama, GPT-NeoX's partial rotary) and sliding windows shorter than the sequence
(Gemma 2); activation_patching takes the packed path for block outputs and sweeps the other paths run by run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY

from lenscope.analysis.builtin.patching import ActivationPatching
from lenscope.analysis.cfg import AnalysisCfg
from lenscope.analysis.patch_sweeps import logit_diff, position_sweep, set_position, sweep
from lenscope.analysis.running import execute_analysis_op
from lenscope.capture.choose import backend_for
from lenscope.capture.packed import packed_position_sweep
from lenscope.capture.patch import patched, record
from lenscope.capture.staged import reused_forward
from lenscope.examples.grokking import GrokTrainer
from lenscope.models.pretrained.config import DecoderConfig
from lenscope.models.pretrained.decoder import Decoder

SEQ = 6
CLEAN = jax.random.randint(jax.random.PRNGKey(0), (2, SEQ), 0, 11)
BAD = CLEAN.at[:, :3].set(jnp.array([1, 2, 3]))
ROPE = (1.0, 0.3, 0.1, 0.01)  # d_head 8: every dim rotates
FAMILIES = {
    "gpt2": dict(family="gpt2", norm="layernorm", norm_eps=1e-5, n_positions=8, gated=False, n_kv_heads=2,
                 activation="gelu_tanh", qkv_bias=True, tied=True),
    "llama": dict(family="llama", n_kv_heads=1, rope_freqs=(ROPE,) * 3, rope_dim=8, qk_norm=True),
    "gpt_neox": dict(family="gpt_neox", n_kv_heads=2, norm="layernorm", rope_freqs=((1.0, 0.1),) * 3, rope_dim=4,
                     parallel=True, gated=False, activation="gelu", qkv_bias=True, out_bias=True, mlp_bias=True),
    "gemma2": dict(family="gemma2", n_kv_heads=1, rope_freqs=(ROPE,) * 3, rope_dim=8, norm_offset=True,
                   post_norms=True, attn_softcap=2.0, final_softcap=3.0, windows=(None, 3, 3), embed_scale=4.0,
                   activation="gelu_tanh"),
}
# (paths, read position, staged chunk or None): block 0's runs pass a middle block and the last, in any order
CASES = {"gpt2": (slice(None), -1, None), "llama": (slice(None, None, -1), 3, None),
         "gpt_neox": (slice(1, None), 4, None), "gemma2": (slice(None), -1, 3)}


def decoder(family: str, vocab: int = 11, layers: int = 3) -> Decoder:
    """A tiny random-weight decoder of one family's computation (no download)."""
    cfg = DecoderConfig(vocab_size=vocab, d_model=16, n_layers=layers, n_heads=2, d_head=8, d_mlp=32,
                        attn_scale=8 ** -0.5, **FAMILIES[family])
    return Decoder(cfg, key=jax.random.PRNGKey(2))


def score(logits: jax.Array) -> jax.Array:
    return logit_diff(logits, CLEAN[:, 0], BAD[:, 0])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_packed_sweep_equals_the_staged_and_whole_forward_sweeps(family):
    net = decoder(family)
    backend, which, readout, chunk = backend_for(net), *CASES[family]
    paths = list(net.block_paths())[which]

    def sweeps():
        _, acts = record(lambda t: net(t), (CLEAN,), paths, backend=backend)
        acts = {path: acts[path] for path in paths}  # in the paths' order
        whole = sweep(lambda patch: score(patched(lambda t: net(t), (BAD,), patch, backend=backend)[:, readout]),
                      paths, lambda p, i: set_position(acts[p], i), SEQ)
        staged = None if chunk is None else position_sweep(
            lambda patch: score(reused_forward(net, (BAD,), patch, readout=readout, backend=backend)),
            paths, acts, SEQ, chunk)  # the positions before each chunk from the unpatched run's KV cache
        return whole, staged, packed_position_sweep(net, (BAD,), acts, readout, score)

    whole, staged, packed = jax.jit(sweeps)()
    assert packed.dtype == whole.dtype == jnp.float32 and packed.shape == (len(paths), SEQ)
    scale = float(jnp.max(jnp.abs(whole)))
    assert scale > 0 and float(jnp.max(jnp.abs(whole - whole[:, :1]))) > 0.01 * scale  # positions differ
    # each row at its own position (rotary, windows), attending to what its run's forward attends to: the same
    # operations on the same values, summed in another order by XLA: equal to float32 rounding of the logits
    np.testing.assert_allclose(packed, whole, rtol=0, atol=2e-6 * scale)
    if staged is not None:
        np.testing.assert_allclose(packed, staged, rtol=0, atol=2e-6 * scale)


def test_a_path_that_is_not_a_block_output_is_left_to_the_caller():
    net, source = decoder("llama"), jnp.zeros((2, SEQ, 16))
    assert packed_position_sweep(net, (BAD,), {"blocks/0/mlp": source}, -1, score) is None  # inside a block
    assert packed_position_sweep(net, (BAD,), {"blocks/0": source, "blocks/0/attn": source}, -1, score) is None
    assert packed_position_sweep(net, (BAD, jnp.ones_like(BAD)), {"blocks/0": source}, -1,
                                 score) is None  # a padding mask: the decoder is not run in pieces


class DecoderGrok(GrokTrainer):
    """The grokking task on a random Llama-shaped pretrained decoder (the checkpoint's computation, no file)."""

    def build_model(self):
        return decoder("llama", vocab=self.args.p + 1, layers=2)


class WatchedPatching(ActivationPatching):
    """activation_patching that keeps the paths its packed sweep served (read after the run)."""

    def position_rows(self, *args):
        rows = super().position_rows(*args)
        self.packed_paths = sorted(rows)
        return rows


class StagedPatching(ActivationPatching):
    """activation_patching with no packed sweep: every path patched run by run (capture.staged)."""

    def position_rows(self, *args):
        return {}


def test_activation_patching_on_a_pretrained_decoder_packs_the_block_outputs(tmp_path):
    trainer = DecoderGrok(TINY + ["model/backend=equinox", f"logging/results={tmp_path / 'results'}"],
                          store=tmp_path / "runs")
    paths = ["blocks/*", "blocks/0/mlp"]
    packed = execute_analysis_op(trainer, analysis_cfg=AnalysisCfg(WatchedPatching, names_filter=paths)).results
    view = next(view for _, view in trainer.bound_views if isinstance(view, WatchedPatching))
    assert view.packed_paths == ["blocks/0", "blocks/1"]  # the MLP was swept run by run
    staged = execute_analysis_op(trainer, analysis_cfg=AnalysisCfg(StagedPatching, names_filter=paths)).results
    assert packed["positions"].shape == staged["positions"].shape == (3, 3)
    np.testing.assert_allclose(packed["positions"], staged["positions"], rtol=0, atol=1e-5)
    assert np.abs(staged["positions"]).max() > 0.1
    trainer.cleanup()
