"""The reference MLP classifier in Flax NNX: the linen `MLPClassifier` with `dense/{i}` for `dense_{i}`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
from flax import nnx

from ..mlp import classify
from .rngs import require_rngs

Array = jax.Array


class MLPClassifier(nnx.Module):
    """Linear layers `dense/0 .. dense/{k-1}` of widths `features` with activation, then `dense/{k}` to n_out logits.

    Inputs [batch, ...] are flattened to [batch, in_features] (NNX layers are built with their input width).
    """

    def __init__(self, in_features: int, features: Sequence[int], n_out: int,
                 activation: Callable[[Array], Array] = jax.nn.relu, *, rngs: nnx.Rngs | None = None) -> None:
        rngs = require_rngs(rngs, type(self))
        widths = [in_features, *features, n_out]
        self.dense = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in zip(widths[:-1], widths[1:])])
        self.activation = activation

    def __call__(self, x: Array, *, deterministic: bool = True) -> Array:
        """Logits [batch, n_out] for inputs x [batch, ...]; `deterministic` is accepted for trainer uniformity."""
        return classify(self.dense, self.activation, x)
