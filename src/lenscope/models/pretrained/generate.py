"""Generation with a KV cache as one compiled program: the prompt in one pass, then a `lax.scan` over new tokens.

Greedy by default (temperature 0), else sampling at `temperature` from the `top_k` most likely tokens.
Prompts of different lengths are left-padded (attention_mask 0 on the left), as `transformers` expects.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ...errors import UsageError
from .decoder import KV, Decoder, positions_of

__all__ = ["generate"]


def _pick(logits: jax.Array, key: jax.Array, temperature: float, top_k: int | None) -> jax.Array:
    """The next token [b] from logits [b, vocab]."""
    if temperature == 0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    scaled = logits.astype(jnp.float32) / temperature
    if top_k is not None:
        floor = jax.lax.top_k(scaled, top_k)[0][:, -1:]
        scaled = jnp.where(scaled < floor, -jnp.inf, scaled)
    return jax.random.categorical(key, scaled, axis=-1).astype(jnp.int32)


@partial(eqx.filter_jit, donate="none")
def _generate(model: Decoder, tokens: jax.Array, mask: jax.Array, key: jax.Array, new: int, temperature: float,
              top_k: int | None) -> jax.Array:
    batch, seq = tokens.shape
    cfg = model.config
    dtype = model.embed.embedding.dtype
    caches = [KV(jnp.zeros((batch, seq + new, cfg.n_kv_heads, cfg.d_head), dtype),
                 jnp.zeros((batch, seq + new, cfg.n_kv_heads, cfg.d_head), dtype)) for _ in range(cfg.n_layers)]
    full = jnp.concatenate([mask, jnp.ones((batch, new), mask.dtype)], axis=1)
    positions = positions_of(mask, batch, seq)
    logits, caches = model.step(tokens, full, positions, caches, 0)
    keys = jax.random.split(key, new)
    first = _pick(logits[:, -1], keys[0], temperature, top_k)

    def one(carry: tuple, step: tuple) -> tuple[tuple, jax.Array]:
        token, position, caches = carry
        index, k = step
        logits, caches = model.step(token[:, None], full, position[:, None], caches, index)
        nxt = _pick(logits[:, -1], k, temperature, top_k)
        return (nxt, position + 1, caches), nxt

    start = (first, positions[:, -1] + 1, caches)
    _, rest = jax.lax.scan(one, start, (seq + jnp.arange(new - 1), keys[1:]))
    return jnp.concatenate([tokens, first[:, None], rest.T], axis=1)


def generate(model: Decoder, tokens: Any, attention_mask: Any = None, *, max_new_tokens: int = 20,
             temperature: float = 0.0, top_k: int | None = None, key: jax.Array | None = None) -> jax.Array:
    """Prompt ids [b, s] followed by `max_new_tokens` generated ids: [b, s + max_new_tokens].

    One compiled program per (shapes, max_new_tokens, temperature, top_k); left-pad prompts of unequal length.
    """
    tokens = np.asarray(tokens, np.int32)
    mask = np.ones_like(tokens) if attention_mask is None else np.asarray(attention_mask, np.int32)
    if tokens.ndim != 2 or mask.shape != tokens.shape:
        raise UsageError(f"generate needs tokens [batch, seq] and a mask of the same shape, got {tokens.shape} "
                         f"and {mask.shape}")
    if not mask[:, -1].all():
        raise UsageError("generate needs left-padded prompts (each row's last position a token, attention_mask 1); "
                         "use tokenizer.to_tokens(..., padding_side='left')")
    if max_new_tokens < 1:
        raise UsageError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0 or (top_k is not None and not 1 <= top_k <= model.config.vocab_size):
        raise UsageError(f"temperature must be >= 0 and top_k in 1..{model.config.vocab_size}, got "
                         f"temperature={temperature}, top_k={top_k}")
    if temperature > 0 and key is None:
        raise UsageError("sampling (temperature > 0) needs an explicit key=jax.random.key(seed)")
    key = jax.random.key(0) if key is None else key
    return _generate(model, jnp.asarray(tokens), jnp.asarray(mask), key, int(max_new_tokens), float(temperature),
                     top_k)
