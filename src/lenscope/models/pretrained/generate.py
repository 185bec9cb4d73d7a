"""Generation with a KV cache as one compiled program: the prompt in one pass, then a `lax.scan` over new tokens.

Greedy by default (temperature 0), else sampling at `temperature` from the `top_k` most likely tokens and/or the
smallest set whose probability reaches `top_p` (nucleus sampling).
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

__all__ = ["filter_logits", "generate"]


def filter_logits(logits: jax.Array, top_k: int | None = None, top_p: float | None = None) -> jax.Array:
    """Logits [b, vocab] with -inf outside the `top_k` largest, then outside the smallest set of the rest whose
    probability reaches `top_p` (the most likely token always stays), as transformers' top-k and top-p warpers."""
    if top_k is not None:
        floor = jax.lax.top_k(logits, top_k)[0][:, -1:]
        logits = jnp.where(logits < floor, -jnp.inf, logits)
    if top_p is not None and top_p < 1:
        ordered = jnp.sort(logits, axis=-1)[:, ::-1]
        probs = jax.nn.softmax(ordered, axis=-1)
        above = jnp.cumsum(probs, axis=-1) - probs                 # the mass of the tokens more likely than each
        floor = jnp.min(jnp.where(above < top_p, ordered, jnp.inf), axis=-1, keepdims=True)
        logits = jnp.where(logits < floor, -jnp.inf, logits)
    return logits


def _pick(logits: jax.Array, key: jax.Array, temperature: float, top_k: int | None,
          top_p: float | None) -> jax.Array:
    """The next token [b] from logits [b, vocab]."""
    if temperature == 0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    scaled = filter_logits(logits.astype(jnp.float32) / temperature, top_k, top_p)
    return jax.random.categorical(key, scaled, axis=-1).astype(jnp.int32)


@partial(eqx.filter_jit, donate="none")
def _generate(model: Decoder, tokens: jax.Array, mask: jax.Array, key: jax.Array, new: int, temperature: float,
              top_k: int | None, top_p: float | None) -> jax.Array:
    batch, seq = tokens.shape
    cfg = model.config
    dtype = model.embed.embedding.dtype
    caches = [KV(jnp.zeros((batch, seq + new, cfg.n_kv_heads, cfg.d_head), dtype),
                 jnp.zeros((batch, seq + new, cfg.n_kv_heads, cfg.d_head), dtype)) for _ in range(cfg.n_layers)]
    full = jnp.concatenate([mask, jnp.ones((batch, new), mask.dtype)], axis=1)
    positions = positions_of(mask, batch, seq)
    logits, caches = model.step(tokens, full, positions, caches, 0)
    keys = jax.random.split(key, new)
    first = _pick(logits[:, -1], keys[0], temperature, top_k, top_p)

    def one(carry: tuple, step: tuple) -> tuple[tuple, jax.Array]:
        token, position, caches = carry
        index, k = step
        logits, caches = model.step(token[:, None], full, position[:, None], caches, index)
        nxt = _pick(logits[:, -1], k, temperature, top_k, top_p)
        return (nxt, position + 1, caches), nxt

    start = (first, positions[:, -1] + 1, caches)
    _, rest = jax.lax.scan(one, start, (seq + jnp.arange(new - 1), keys[1:]))
    return jnp.concatenate([tokens, first[:, None], rest.T], axis=1)


def generate(model: Decoder, tokens: Any, attention_mask: Any = None, *, max_new_tokens: int = 20,
             temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
             key: jax.Array | None = None) -> jax.Array:
    """Prompt ids [b, s] followed by `max_new_tokens` generated ids: [b, s + max_new_tokens].

    One compiled program per (shapes, max_new_tokens, temperature, top_k, top_p); left-pad prompts of unequal
    length.
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
    if top_p is not None and not 0 < top_p <= 1:
        raise UsageError(f"top_p must be in (0, 1] (the probability the kept tokens reach), got {top_p}")
    if temperature > 0 and key is None:
        raise UsageError("sampling (temperature > 0) needs an explicit key=jax.random.key(seed)")
    key = jax.random.key(0) if key is None else key
    return _generate(model, jnp.asarray(tokens), jnp.asarray(mask), key, int(max_new_tokens), float(temperature),
                     top_k, None if top_p is None else float(top_p))
