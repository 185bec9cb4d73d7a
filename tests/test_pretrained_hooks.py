"""The generic decoder's hook points: discovered as module paths, named as in TransformerLens (accepted with
dots), patchable, and the forward resumable from any block's residual stream. No torch needed."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lenscope.capture import CaptureError, EquinoxBackend, discover, match_paths, validate_selection
from lenscope.capture.patch import patched, record
from lenscope.models.pretrained import Decoder, DecoderConfig, generate, random_decoder
from lenscope.models.pretrained.families import decoder_config
from lenscope.models.pretrained.rope import inverse_frequencies

BACKEND = EquinoxBackend()
ROPE = inverse_frequencies({"rope_theta": 10000.0}, 8)
LLAMA = DecoderConfig(family="llama", vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_head=8,
                      d_mlp=64, rope_freqs=(ROPE, ROPE), rope_dim=8, attn_scale=8 ** -0.5)
IDS = jnp.asarray(np.random.default_rng(0).integers(0, 50, (2, 6)))


@pytest.fixture(scope="module")
def model() -> Decoder:
    return random_decoder(LLAMA, seed=0, std=0.3)


def test_hook_points_are_module_paths_in_call_order(model: Decoder) -> None:
    paths = discover(lambda t: model(t), (IDS,), backend=BACKEND)
    block = [p[len("blocks/0/"):] for p in paths if p.startswith("blocks/0/")]
    assert block[:4] == ["hook_resid_pre", "hook_attn_in", "ln1", "ln1/hook_scale"]
    for name in ("attn/hook_q", "attn/hook_rot_k", "attn/hook_attn_scores", "attn/hook_pattern", "attn/hook_z",
                 "attn/out", "attn/hook_result", "hook_attn_out", "hook_resid_mid", "hook_mlp_in", "mlp/hook_pre",
                 "mlp/hook_post", "mlp/fc_out", "hook_mlp_out", "hook_resid_post"):
        assert name in block, name
    assert paths[:3] == ["", "embed", "hook_embed"]
    assert paths[-4:] == ["ln_final", "ln_final/hook_scale", "ln_final/hook_normalized", "unembed"]


def test_transformerlens_names_select_filter_and_patch(model: Decoder) -> None:
    paths = discover(lambda t: model(t), (IDS,), backend=BACKEND)
    assert validate_selection(["blocks.1.hook_resid_post", "blocks/0/attn"], paths)[0] == [
        "blocks/1/hook_resid_post", "blocks/0/attn"]
    assert match_paths("blocks.*.attn.hook_pattern", paths) == ["blocks/0/attn/hook_pattern",
                                                                "blocks/1/attn/hook_pattern"]
    with pytest.raises(CaptureError, match="blocks.9.hook_resid_post"):
        validate_selection(["blocks.9.hook_resid_post"], paths)
    logits, cache = jax.jit(lambda t: record(lambda x: model(x), (t,), ["blocks.0.attn.hook_pattern",
                                                                         "blocks.1.ln2.hook_scale"],
                                             backend=BACKEND))(IDS)
    pattern = cache["blocks.0.attn.hook_pattern"]
    assert pattern.shape == (2, 4, 6, 6)
    np.testing.assert_allclose(pattern.sum(-1), 1.0, atol=1e-6)
    assert float(jnp.abs(jnp.triu(pattern, 1)).max()) == 0.0  # causal
    assert cache["blocks.1.ln2.hook_scale"].shape == (2, 6, 1)
    zeroed = jax.jit(lambda t: patched(lambda x: model(x), (t,), {"blocks.1.hook_resid_post": jnp.zeros_like},
                                       backend=BACKEND))(IDS)
    np.testing.assert_allclose(zeroed, eqx.filter_jit(lambda m, r: m.unembed_fn(r))(model, jnp.zeros((2, 6, 32))),
                               atol=1e-6)
    assert float(jnp.abs(zeroed - logits).max()) > 0


def test_forward_starts_and_stops_at_any_block(model: Decoder) -> None:
    @eqx.filter_jit
    def run(model: Decoder, ids: jax.Array) -> tuple:
        full, streams = record(lambda t: model(t), (ids,), [f"blocks/{i}/hook_resid_pre" for i in range(2)],
                               backend=BACKEND)
        streams = [streams[f"blocks/{i}/hook_resid_pre"] for i in range(2)]
        resumed = [model(resid=streams[i], start_at_layer=i) for i in range(2)]
        stopped = [model(ids, stop_at_layer=i) for i in range(2)]
        return full, streams, resumed, stopped

    full, streams, resumed, stopped = run(model, IDS)
    for layer in range(2):
        np.testing.assert_allclose(resumed[layer], full, atol=1e-6)
        np.testing.assert_allclose(stopped[layer], streams[layer], atol=1e-6)


def test_frozen_pattern_and_norm_scale_keep_the_forward(model: Decoder) -> None:
    """Patching the pattern and norm scales with their own clean values (stop_gradient) leaves logits unchanged."""
    names = ["blocks/0/attn/hook_pattern", "blocks/0/ln1/hook_scale", "blocks/1/ln2/hook_scale"]
    @jax.jit
    def run(ids: jax.Array) -> tuple:
        logits, clean = record(lambda t: model(t), (ids,), names, backend=BACKEND)
        frozen = patched(lambda t: model(t), (ids,),
                         {n: (lambda v, n=n: jax.lax.stop_gradient(clean[n])) for n in names}, backend=BACKEND)
        return logits, frozen

    logits, frozen = run(IDS)
    np.testing.assert_allclose(frozen, logits, atol=1e-6)


def test_kv_cache_generation_matches_the_full_forward(model: Decoder) -> None:
    out = generate(model, IDS, max_new_tokens=5)
    forward = eqx.filter_jit(lambda m, t: m(t))
    np.testing.assert_array_equal(jnp.argmax(forward(model, out[:, :-1])[:, 5:], -1), out[:, 6:])
    sampled = generate(model, IDS, max_new_tokens=5, temperature=1.0, top_k=3, key=jax.random.key(1))
    again = generate(model, IDS, max_new_tokens=5, temperature=1.0, top_k=3, key=jax.random.key(1))
    np.testing.assert_array_equal(sampled, again)
    top3 = jax.lax.top_k(forward(model, sampled[:, :-1])[:, 5], 3)[1]  # causal: position 5 sees the prompt only
    assert all(int(sampled[b, 6]) in top3[b].tolist() for b in range(2))


def test_unhandled_config_attributes_are_refused_by_name() -> None:
    base = {"model_type": "llama", "vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 64}
    assert decoder_config(base).n_kv_heads == 4
    from lenscope.errors import UsageError
    with pytest.raises(UsageError, match="'attn_temperature_tuning'"):
        decoder_config({**base, "attn_temperature_tuning": True})
    with pytest.raises(UsageError, match="rope_type 'yarn'"):
        decoder_config({**base, "rope_scaling": {"type": "yarn", "factor": 2.0}})
    with pytest.raises(UsageError, match="model_type 'bert'.*gpt2"):
        decoder_config({**base, "model_type": "bert"})
    with pytest.raises(UsageError, match="scale_attn_by_inverse_layer_idx"):
        decoder_config({"model_type": "gpt2", "vocab_size": 50, "n_embd": 32, "n_layer": 2, "n_head": 4,
                        "n_positions": 16, "scale_attn_by_inverse_layer_idx": True})
    with pytest.raises(UsageError, match="hidden_act='swiglu_x'"):
        decoder_config({**base, "hidden_act": "swiglu_x"})


def test_remat_recomputes_each_block_in_the_backward_pass_with_the_same_gradients(model: Decoder) -> None:
    params, static = eqx.partition(model, eqx.is_array)

    def loss(params, remat):
        return eqx.combine(params, static)(IDS, remat=remat).astype(jnp.float32).std()

    # both gradients in one compiled program (op-by-op, each grad dispatches hundreds of tiny programs)
    kept, recomputed = jax.jit(lambda p: tuple(jax.grad(loss)(p, remat) for remat in (False, True)))(params)
    for a, b in zip(jax.tree_util.tree_leaves(kept), jax.tree_util.tree_leaves(recomputed)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
    with_remat, without = (str(jax.make_jaxpr(lambda p, r=r: jax.grad(loss)(p, r))(params)) for r in (True, False))
    assert "checkpoint" in with_remat or "remat" in with_remat
    assert "checkpoint" not in without and "remat" not in without
