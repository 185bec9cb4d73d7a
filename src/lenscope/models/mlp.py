"""A plain multilayer perceptron classifier: the second reference model."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array


def classify(layers: Sequence[Callable[[Array], Array]], activation: Callable[[Array], Array], x: Array) -> Array:
    """Logits of inputs x [batch, ...] flattened to float32 rows, through `layers` with `activation` between them."""
    x = jnp.reshape(x, (x.shape[0], -1)).astype(jnp.float32)
    for layer in layers[:-1]:
        x = activation(layer(x))
    return layers[-1](x)


class MLPClassifier(nn.Module):
    """Dense layers `dense_0 .. dense_{k-1}` of widths `features` with activation, then `dense_{k}` to n_out logits.

    Inputs [batch, ...] are flattened to [batch, -1] and cast to `dtype`.
    """

    features: Sequence[int]
    n_out: int
    activation: Callable[[Array], Array] = nn.relu
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, *, deterministic: bool = True) -> Array:
        """Logits [batch, n_out] for inputs x [batch, ...]; `deterministic` is accepted for trainer uniformity."""
        x = jnp.reshape(x, (x.shape[0], -1)).astype(self.dtype)
        for i, width in enumerate(self.features):
            x = self.activation(nn.Dense(width, dtype=self.dtype, name=f"dense_{i}")(x))
        return nn.Dense(self.n_out, dtype=self.dtype, name=f"dense_{len(self.features)}")(x)
