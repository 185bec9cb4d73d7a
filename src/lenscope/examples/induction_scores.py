"""The induction study's scores (Olsson et al. 2022), as pure functions of logits, tokens and attention patterns.

Sequences of repeated random tokens are `[EOS, r_0 .. r_{L-1}, r_0 .. r_{L-1}]` (2L + 1 tokens): copy 1 sits at
positions 1..L, copy 2 at L+1..2L. An induction head attending from copy-2 token j to copy-1 token j + 1 (the
token after the earlier occurrence of the current one) predicts copy 2 from copy 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["icl_windows", "in_context_score", "position_losses", "prefix_matching", "previous_token",
           "repeated_halves", "repeated_tokens"]


def position_losses(logits: jax.Array, tokens: jax.Array) -> jax.Array:
    """Next-token cross-entropy [batch, seq - 1] of logits [batch, seq, vocab] at tokens [batch, seq]:
    position t predicts token t + 1 (the last position has no target in the row)."""
    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]


def icl_windows(positions: int) -> tuple[slice, slice]:
    """(early, late) windows of `positions` loss positions T, each min(16, T/8) wide: from T/16, and the last ones
    (T = 128: [8, 24) and [112, 128); Olsson's loss at token 500 minus at token 50, scaled to a short context)."""
    width = max(1, min(16, positions // 8))
    start = positions // 16
    return slice(start, start + width), slice(positions - width, positions)


def in_context_score(per_position: jax.Array) -> jax.Array:
    """Mean loss in the late window minus in the early window (negative: later tokens are predicted better)."""
    early, late = icl_windows(per_position.shape[-1])
    return per_position[..., late].mean(-1) - per_position[..., early].mean(-1)


def repeated_tokens(rows: int, length: int, vocab: int, seed: int, first: int = 1) -> np.ndarray:
    """`rows` sequences [EOS, r, r] of `length` uniform tokens r from [first, vocab) repeated, [rows, 2 length + 1]."""
    rng = np.random.default_rng([seed, 64])
    random = rng.integers(first, vocab, (rows, length))
    return np.concatenate([np.zeros((rows, 1), np.int64), random, random], axis=1).astype(np.int32)


def repeated_halves(per_position: jax.Array, length: int) -> tuple[jax.Array, jax.Array]:
    """(loss on copy 1's tokens 1..L-1, loss on copy 2's tokens 1..L-1) of per-position losses [batch, 2L]:
    token 0 of either copy follows a token seen nowhere before it, so no mechanism predicts it."""
    return per_position[:, 1:length].mean(), per_position[:, length + 1: 2 * length].mean()


def prefix_matching(pattern: jax.Array, length: int) -> jax.Array:
    """Per head [heads]: mean attention from copy-2 token j (position L+1+j) to copy-1 token j+1 (position j+2),
    j = 0..L-2, of patterns [batch, heads, q, k] on repeated random tokens."""
    j = jnp.arange(length - 1)
    return pattern[:, :, length + 1 + j, j + 2].mean(axis=(0, 2))


def previous_token(pattern: jax.Array) -> jax.Array:
    """Per head [heads]: mean attention from each position t >= 1 to t - 1, of patterns [batch, heads, q, k]."""
    t = jnp.arange(1, pattern.shape[-2])
    return pattern[:, :, t, t - 1].mean(axis=(0, 2))
