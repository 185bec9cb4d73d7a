"""The reference MLP classifier in Equinox: the linen `MLPClassifier` with `dense/{i}` for `dense_{i}`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import equinox as eqx
import jax

from ..mlp import classify
from .layers import Dense

Array = jax.Array


class MLPClassifier(eqx.Module):
    """Dense layers `dense/0 .. dense/{k-1}` of widths `features` with activation, then `dense/{k}` to n_out logits.

    Inputs [batch, ...] are flattened to [batch, in_features].
    """

    dense: list[Dense]
    activation: Callable[[Array], Array]

    def __init__(self, in_features: int, features: Sequence[int], n_out: int,
                 activation: Callable[[Array], Array] = jax.nn.relu, *, key: Array) -> None:
        widths = [in_features, *features, n_out]
        keys = jax.random.split(key, len(widths) - 1)
        self.dense = [Dense(a, b, key=k) for a, b, k in zip(widths[:-1], widths[1:], keys)]
        self.activation = activation

    def __call__(self, x: Array, *, deterministic: bool = True) -> Array:
        """Logits [batch, n_out] for inputs x [batch, ...]; `deterministic` is accepted for trainer uniformity."""
        return classify(self.dense, self.activation, x)
