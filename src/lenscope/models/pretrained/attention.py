"""The decoder's attention: grouped key/value heads, rotary positions, q/k norms, soft-cap and sliding window.

One core (`Attention._attend`: scores, mask, softmax, values, output) serves the forward, which masks by
index (causal, window, padding, a key/value cache), and `step`, which attends from packed rows to context
rows under a given mask at given positions (capture.packed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from ...errors import UsageError
from ..equinox.layers import Dense
from .config import DecoderConfig
from .heads import attention_output, project_qkv
from .layers import Hook, Norm, rotate

Array = jax.Array

__all__ = ["KV", "Attention", "config_norm"]


class KV(NamedTuple):
    """One layer's key/value cache [batch, slots, kv_heads, d_head]."""

    k: Array
    v: Array


def config_norm(cfg: DecoderConfig, features: int | None = None) -> Norm:
    """The config's norm (LayerNorm or RMSNorm) over d_model or `features`."""
    return Norm(features or cfg.d_model, cfg.norm, cfg.norm_eps, cfg.norm_offset)


class Attention(eqx.Module):
    """Causal self-attention with grouped key/value heads, optional rotary, q/k norms, soft-cap and window."""

    query: Dense
    key: Dense
    value: Dense
    out: Dense
    q_norm: Norm | None
    k_norm: Norm | None
    hook_q: Hook
    hook_k: Hook
    hook_v: Hook
    hook_rot_q: Hook
    hook_rot_k: Hook
    hook_attn_scores: Hook
    hook_pattern: Hook
    hook_z: Hook
    hook_result: Hook
    freqs: tuple[float, ...] | None = eqx.field(static=True)
    window: int | None = eqx.field(static=True)
    scale: float = eqx.field(static=True)
    softcap: float | None = eqx.field(static=True)

    def __init__(self, cfg: DecoderConfig, layer: int, *, key: Array) -> None:
        kq, kk, kv, ko = jax.random.split(key, 4)
        d, h, g = cfg.d_head, cfg.n_heads, cfg.n_kv_heads
        self.query = Dense(cfg.d_model, (h, d), use_bias=cfg.qkv_bias, key=kq)
        self.key = Dense(cfg.d_model, (g, d), use_bias=cfg.qkv_bias, key=kk)
        self.value = Dense(cfg.d_model, (g, d), use_bias=cfg.qkv_bias, key=kv)
        self.out = Dense((h, d), cfg.d_model, axis=(-2, -1), use_bias=cfg.out_bias, key=ko)
        self.q_norm = config_norm(cfg, d) if cfg.qk_norm else None
        self.k_norm = config_norm(cfg, d) if cfg.qk_norm else None
        (self.hook_q, self.hook_k, self.hook_v, self.hook_rot_q, self.hook_rot_k, self.hook_attn_scores,
         self.hook_pattern, self.hook_z, self.hook_result) = (Hook() for _ in range(9))
        self.freqs, self.window = cfg.freqs(layer), cfg.window(layer)
        self.scale, self.softcap = cfg.attn_scale, cfg.attn_softcap

    def __call__(self, x: Array, attention_mask: Array | None, positions: Array, cache: KV | None = None,
                 index: Array | int = 0, return_pattern: bool = False) -> Array | tuple:
        """Attend over x [b, q, d_model] (or over `cache` with x written at slot `index`).

        attention_mask [b, keys] marks the keys that exist (1) and padding (0). Returns the output (with the
        pattern when `return_pattern`): the same value with a cache or without, so a patch of this module's
        output sees one array either way; `write` gives the updated cache.
        """
        q, k, v = project_qkv(self, x)
        q, k = self._positioned(q, k, positions, positions)
        if cache is not None:
            k, v = self._written(k, v, cache, index)
        q_idx = index + jnp.arange(q.shape[1])[:, None]
        k_idx = jnp.arange(k.shape[1])[None, :]
        allowed = ((k_idx <= q_idx) & self._in_window(q_idx, k_idx))[None, None]
        if attention_mask is not None:
            allowed = allowed & (attention_mask[:, None, None, :] > 0)
        y, pattern = self._attend(q, k, v, allowed)
        return (y, pattern) if return_pattern else y

    def write(self, x: Array, positions: Array, cache: KV, index: Array | int) -> KV:
        """The cache with the keys and values of x [b, q, d_model] (at `positions`) written at slot `index`
        (what `__call__` attends over; under jit the projections are computed once for both)."""
        q, k, v = project_qkv(self, x)
        _, k = self._positioned(q, k, positions, positions)
        return KV(*self._written(k, v, cache, index))

    def _written(self, k: Array, v: Array, cache: KV, index: Array | int) -> tuple[Array, Array]:
        if k.shape[-2] != cache.k.shape[-2]:
            raise UsageError(
                f"hook_attn_in was patched while generating with a key/value cache of {cache.k.shape[-2]} "
                f"key/value heads: a per-head input needs one key/value head per query head "
                f"({k.shape[-2]}); patch hook_attn_in in a forward without a cache (model(tokens)), or patch "
                "ln1's input (hook_resid_pre) instead")
        start = (0, index, 0, 0)
        return (jax.lax.dynamic_update_slice(cache.k, k.astype(cache.k.dtype), start),
                jax.lax.dynamic_update_slice(cache.v, v.astype(cache.v.dtype), start))

    def step(self, x: Array, mask: Array, context: Sequence[Array], positions: Array,
             keyed: int | None = None) -> Array:
        """Attend from rows x [..., rows, d_model] (normalized) to the `context` parts before them and to x's
        first `keyed` rows (all: None), where mask [..., heads or 1, rows, keys] holds; positions
        [..., context + rows]: the context's positions, then the rows' (capture.packed).

        Each part's keys and values are projected on its own rows (a part shared by many rows once), then
        broadcast to x's leading axes; the rest is the forward's computation at those positions.
        """
        rows = x.shape[-2]
        parts = [*context, x if keyed is None else x[..., :keyed, :]]
        lead = x.shape[:-2]
        k, v = (jnp.concatenate([jnp.broadcast_to(y, (*lead, *y.shape[-3:])) for y in map(dense, parts)], axis=-3)
                for dense in (self.key, self.value))
        at = positions[..., -rows:]  # the rows' own positions
        positions = positions if keyed is None else positions[..., :positions.shape[-1] - rows + keyed]
        q, k = self._positioned(self.query(x), k, at, positions)
        allowed = mask & self._in_window(at[..., None, :, None], positions[..., None, None, :])  # [..., 1, q, k]
        return self._attend(q, k, v, allowed)[0]

    def _positioned(self, q: Array, k: Array, q_at: Array, k_at: Array) -> tuple[Array, Array]:
        """Queries and keys normalized (Qwen 3, Gemma 3) and rotated at their positions (rotary families)."""
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.freqs is not None:
            q, k = self.hook_rot_q(rotate(q, q_at, self.freqs)), self.hook_rot_k(rotate(k, k_at, self.freqs))
        return q, k

    def _in_window(self, q_at: Array, k_at: Array) -> Array | bool:
        """Where a key at k_at is within a query at q_at's sliding window (everywhere without one)."""
        return True if self.window is None else k_at > q_at - self.window

    def _attend(self, q: Array, k: Array, v: Array, allowed: Array) -> tuple[Array, Array]:
        """(output, pattern) of q [..., q, heads, d_head] over k, v [..., keys, kv_heads, d_head] where `allowed`
        (broadcast against the scores [..., heads, q, keys]) holds: the core the forward and step share."""
        groups = q.shape[-2] // k.shape[-2]
        keys, values = jnp.repeat(k, groups, axis=-2), jnp.repeat(v, groups, axis=-2)
        scores = jnp.einsum("...qhd,...khd->...hqk", q, keys) * jnp.asarray(self.scale, q.dtype)
        scores = scores.astype(jnp.float32)
        if self.softcap is not None:
            scores = jnp.tanh(scores / self.softcap) * self.softcap
        scores = self.hook_attn_scores(jnp.where(allowed, scores, jnp.finfo(jnp.float32).min))
        pattern = self.hook_pattern(jax.nn.softmax(scores, axis=-1))
        z = self.hook_z(jnp.einsum("...hqk,...khd->...qhd", pattern.astype(values.dtype), values))
        return attention_output(self, z), pattern
