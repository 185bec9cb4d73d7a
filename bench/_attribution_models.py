"""The tiny models and transcoders the attribution tests and bench/attribution.py share: lenscope's reference
Transformer with LayerNorms (random weights, LayerNorm parameters moved off their defaults so frozen scales matter)
and one random JumpReLU Dictionary transcoder per layer, biased so that a good share of features fire."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from _peer_common import Shape

from lenscope.dictionaries import Dictionary, Spec, init_params
from lenscope.models import Transformer


def reference_model(shape: Shape, seed: int = 0) -> tuple[Transformer, Any]:
    """(model, params): shape's decoder with LayerNorms, d_mlp = 4 d_model, random LayerNorm scales and biases."""
    model = Transformer(vocab_size=shape.vocab, seq_len=shape.seq, d_model=shape.d_model, n_heads=shape.heads,
                        d_head=shape.d_head, d_mlp=shape.d_mlp, n_layers=shape.layers, use_ln=True)
    params = model.init(jax.random.key(seed), jnp.zeros((1, shape.seq), jnp.int32))["params"]
    keys = iter(jax.random.split(jax.random.key(seed + 1), 4 * shape.layers + 4))

    def jitter(path: Any, x: jax.Array) -> jax.Array:
        is_norm = any(getattr(p, "key", "").startswith("ln") for p in path)
        return x + 0.2 * jax.random.normal(next(keys), x.shape) if is_norm else x

    return model, jax.tree_util.tree_map_with_path(jitter, params)


def transcoders(n_layers: int, d_model: int, d_features: int, seed: int = 10, bias: float = 0.3,
                threshold: float = 0.2) -> list[Dictionary]:
    """One random JumpReLU transcoder per layer (lenscope.dictionaries), no skip connection."""
    spec = Spec("jumprelu", d_in=d_model, d_sae=d_features, transcoder=True)
    out = []
    for layer in range(n_layers):
        params = init_params(jax.random.key(seed + layer), spec, decoder_init_norm=None)
        params["b_enc"] = bias * jax.random.normal(jax.random.key(seed + 100 + layer), (d_features,))
        params["threshold"] = jnp.full(d_features, threshold)
        out.append(Dictionary.of(spec, params))
    return out
