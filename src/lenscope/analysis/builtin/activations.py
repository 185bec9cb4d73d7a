"""Activation statistics of selected layers: mean, std, mean norm and fraction of dead units."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .base import OpAnalysis, layer_output, root_label


def activation_stats(y: jax.Array) -> dict[str, jax.Array]:
    """Statistics of activations y [..., units]: a unit is dead when it is <= 0 for every example and position."""
    y = y.astype(jnp.float32)
    flat = y.reshape(-1, y.shape[-1])
    return {
        "mean": flat.mean(),
        "std": flat.std(),
        "norm": jnp.linalg.norm(flat, axis=-1).mean(),
        "dead_fraction": jnp.mean(jnp.all(flat <= 0, axis=0)),
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
