"""The decoder's small parts: identity hook points, LayerNorm/RMSNorm with a hooked scale, rotary embedding."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array

__all__ = ["ACTIVATIONS", "Hook", "Norm", "rotate"]

ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "silu": jax.nn.silu,
    "relu": jax.nn.relu,
}


class Hook(eqx.Module):
    """An identity module: its call is a module path (capture, patch), like TransformerLens's HookPoint."""

    def __call__(self, x: Array) -> Array:
        """Return x unchanged (a patch may replace it)."""
        return x


class Norm(eqx.Module):
    """LayerNorm or RMSNorm over the last axis, in float32; `hook_scale` is the divisor sqrt(var + eps).

    `scale` (and for LayerNorm `bias`) multiply the normalized value; with `offset` (Gemma) by 1 + scale.
    """

    scale: Array
    bias: Array | None
    hook_scale: Hook
    hook_normalized: Hook
    kind: str = eqx.field(static=True)
    eps: float = eqx.field(static=True)
    offset: bool = eqx.field(static=True)

    def __init__(self, features: int, kind: str, eps: float, offset: bool = False) -> None:
        self.scale = jnp.zeros((features,), jnp.float32) if offset else jnp.ones((features,), jnp.float32)
        self.bias = jnp.zeros((features,), jnp.float32) if kind == "layernorm" else None
        self.hook_scale, self.hook_normalized = Hook(), Hook()
        self.kind, self.eps, self.offset = kind, eps, offset

    def __call__(self, x: Array) -> Array:
        """Normalize x [..., features]."""
        y = x.astype(jnp.float32)
        if self.kind == "layernorm":
            y = y - y.mean(-1, keepdims=True)
        y = y / self.hook_scale(jnp.sqrt((y * y).mean(-1, keepdims=True) + self.eps))
        scale = self.scale.astype(jnp.float32)
        y = y * (1.0 + scale if self.offset else scale)
        if self.bias is not None:
            y = y + self.bias.astype(jnp.float32)
        return self.hook_normalized(y.astype(x.dtype))


def rotate(x: Array, positions: Array, freqs: tuple[float, ...]) -> Array:
    """Rotary embedding of the leading 2*len(freqs) dims of each head of x [..., s, heads, d] at positions
    [..., s] (broadcast against x's leading axes)."""
    dim = 2 * len(freqs)
    angles = positions[..., None].astype(jnp.float32) * jnp.asarray(np.asarray(freqs, np.float32))
    angles = jnp.concatenate([angles, angles], axis=-1)[..., None, :]  # [..., s, 1, dim]
    cos, sin = jnp.cos(angles).astype(x.dtype), jnp.sin(angles).astype(x.dtype)
    rot, rest = x[..., :dim], x[..., dim:]
    half = dim // 2
    turned = jnp.concatenate([-rot[..., half:], rot[..., :half]], axis=-1)
    return jnp.concatenate([rot * cos + turned * sin, rest], axis=-1)
