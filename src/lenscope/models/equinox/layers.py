"""Equinox layers shaped like linen's: batched over leading axes, parameters named and laid out as in linen.

`Dense` (linen Dense and DenseGeneral: `kernel` [inputs..., outputs...], `bias`), `Embed`
(`embedding` [vocab, features]) and `LayerNorm` (`scale`, `bias`) use linen's default initializers,
so a reference model has the same parameter tree in every library and converts leaf for leaf.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp

Array = jax.Array
Shape = int | tuple[int, ...]


def _tuple(size: Shape) -> tuple[int, ...]:
    return (size,) if isinstance(size, int) else tuple(size)


class Dense(eqx.Module):
    """y = x . kernel + bias, contracting `axis` of x (default the last) with the kernel's leading axes."""

    kernel: Array
    bias: Array | None
    axis: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, in_features: Shape, out_features: Shape, *, axis: int | tuple[int, ...] = -1,
                 use_bias: bool = True, key: Array) -> None:
        ins, outs = _tuple(in_features), _tuple(out_features)
        flat = jax.nn.initializers.lecun_normal()(key, (math.prod(ins), math.prod(outs)), jnp.float32)
        self.kernel = flat.reshape(ins + outs)
        self.bias = jnp.zeros(outs, jnp.float32) if use_bias else None
        self.axis = _tuple(axis)

    def __call__(self, x: Array) -> Array:
        """Apply to x [..., inputs...] -> [..., outputs...]."""
        contracted = tuple(a % x.ndim for a in self.axis)
        y = jnp.tensordot(x, self.kernel, axes=(contracted, tuple(range(len(self.axis)))))
        return y if self.bias is None else y + self.bias


class Embed(eqx.Module):
    """A lookup table `embedding` [num_embeddings, features]."""

    embedding: Array

    def __init__(self, num_embeddings: int, features: int, *, key: Array) -> None:
        init = jax.nn.initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)
        self.embedding = init(key, (num_embeddings, features), jnp.float32)

    def __call__(self, tokens: Array) -> Array:
        """Rows of the table for integer tokens [...] -> [..., features]."""
        return jnp.take(self.embedding, tokens, axis=0)


class LayerNorm(eqx.Module):
    """Normalize the last axis to zero mean and unit variance, then `scale` and `bias` (epsilon 1e-6)."""

    scale: Array
    bias: Array
    epsilon: float = eqx.field(static=True, default=1e-6)

    def __init__(self, features: int, epsilon: float = 1e-6) -> None:
        self.scale = jnp.ones((features,), jnp.float32)
        self.bias = jnp.zeros((features,), jnp.float32)
        self.epsilon = epsilon

    def __call__(self, x: Array) -> Array:
        """Normalize x [..., features]."""
        mean = x.mean(-1, keepdims=True)
        var = jnp.maximum((x * x).mean(-1, keepdims=True) - mean * mean, 0.0)
        return (x - mean) * jax.lax.rsqrt(var + self.epsilon) * self.scale + self.bias
