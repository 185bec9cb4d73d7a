"""Activation statistics of selected layers: mean, std, mean norm and fraction of dead units."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .base import OpAnalysis, layer_output, root_label


def activation_stats(y: jax.Array) -> dict[str, jax.Array]:
    """Statistics of activations y [..., units]: a unit is dead when it is <= 0 for every example and position.

    Masked entries (the float32 minimum that masks attention scores, or any non-finite value) are left out.
    """
    y = y.astype(jnp.float32)
    flat = y.reshape(-1, y.shape[-1])
    kept = jnp.isfinite(flat) & (flat > jnp.finfo(jnp.float32).min)
    count = jnp.maximum(kept.sum(), 1)
    values = jnp.where(kept, flat, 0.0)
    mean = values.sum() / count
    return {
        "mean": mean,
        "std": jnp.sqrt(jnp.where(kept, (flat - mean) ** 2, 0.0).sum() / count),
        "norm": jnp.linalg.norm(values, axis=-1).mean(),
        "dead_fraction": jnp.mean(jnp.all(jnp.where(kept, flat <= 0, True), axis=0)),
    }


class ActivationStats(OpAnalysis):
    """Per selected layer (default: every module but the root): mean, std, mean L2 norm, fraction of dead units."""

    NAME = "activation_stats"

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, dict[str, jax.Array]]:
        """One dict of scalars per layer path, from each layer re-run on its captured inputs."""
        return {root_label(path): activation_stats(layer_output(layer, x))
                for path, layer, x in self.by_path(layers, inputs)}

    def plot(self, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The statistics as JSON, tied to the node."""
        return {"node": str(self.node), "layers": {path: {k: float(v) for k, v in stats.items()}
                                                   for path, stats in results.items()}}
