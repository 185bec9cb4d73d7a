"""Weight processing (fold_ln, center_writing_weights, center_unembed, fold_value_biases) keeps the logits:
exactly up to float error, and center_unembed up to the per-position shift softmax ignores. No torch needed."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lenscope.errors import UsageError
from lenscope.models.pretrained import DecoderConfig, process, random_decoder
from lenscope.models.pretrained.rope import inverse_frequencies

ROPE = inverse_frequencies({"rope_theta": 10000.0}, 8)
GPT2 = DecoderConfig(family="gpt2", vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, d_head=8,
                     d_mlp=64, norm="layernorm", norm_eps=1e-5, n_positions=16, gated=False, activation="gelu_tanh",
                     qkv_bias=True, out_bias=True, mlp_bias=True, attn_scale=8 ** -0.5, tied=True)
GEMMA = DecoderConfig(family="gemma", vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_head=8,
                      d_mlp=64, norm_offset=True, rope_freqs=(ROPE, ROPE), rope_dim=8, qkv_bias=True,
                      activation="gelu_tanh", attn_scale=8 ** -0.5, embed_scale=32 ** 0.5, tied=True)
IDS = jnp.asarray(np.random.default_rng(0).integers(0, 50, (2, 7)))
MASK = jnp.asarray([[0, 0, 1, 1, 1, 1, 1], [1] * 7])
forward = eqx.filter_jit(lambda model, ids, mask: model(ids, mask))


def perturbed(cfg: DecoderConfig) -> eqx.Module:
    """A random decoder whose norm scales and biases are random too (so every fold has something to move)."""
    model = random_decoder(cfg, seed=1, std=0.2)
    leaves, treedef = jax.tree_util.tree_flatten(model)
    rng = np.random.default_rng(2)
    return jax.tree_util.tree_unflatten(treedef, [x + jnp.asarray(rng.normal(0, 0.2, x.shape), x.dtype)
                                                  for x in leaves])


@pytest.mark.parametrize("cfg", [GPT2, GEMMA], ids=["layernorm", "gemma-rmsnorm"])
def test_processing_keeps_the_logits(cfg: DecoderConfig) -> None:
    model = perturbed(cfg)
    reference = forward(model, IDS, MASK)
    steps = {"fold_ln": True, "fold_value_biases": True}
    if cfg.norm == "layernorm":
        steps["center_writing_weights"] = True
    processed = process(model, **steps)
    assert float(jnp.abs(processed.blocks[0].ln1.scale - (0.0 if cfg.norm_offset else 1.0)).max()) == 0.0
    assert float(jnp.abs(processed.blocks[0].attn.value.bias).max()) == 0.0
    np.testing.assert_allclose(forward(processed, IDS, MASK), reference, atol=2e-5)
    centered = forward(process(processed, center_unembed=True), IDS, MASK)
    np.testing.assert_allclose(centered, reference - reference.mean(-1, keepdims=True), atol=2e-5)
    assert float(jnp.abs(forward(process(model), IDS, MASK) - reference).max()) == 0.0  # all off: unchanged


def test_center_writing_weights_refuses_rmsnorm_models() -> None:
    with pytest.raises(UsageError, match="center_writing_weights.*rmsnorm"):
        process(perturbed(GEMMA), center_writing_weights=True)
