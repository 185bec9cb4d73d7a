"""Steering: add a direction at a path with a sweep of scales (vmapped) and follow the answer metrics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from .base import root_label
from .intervention_op import InterventionOp


class Steering(InterventionOp):
    """For each selected path: add `scale * direction` to its output for each scale, on the clean batch.

    `direction` (parameter): a vector [d_model] or [seq, d_model]; None takes the difference of mean
    activations between the clean and the corrupted batch (clean - corrupted, per position).
    """

    NAME = "steering"
    PARAMS: ClassVar[Mapping[str, Any]] = {**InterventionOp.PARAMS, "scales": (-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0),
                                           "direction": None}

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, Any]:
        """{path: {"loss", "accuracy", "logit_diff"}, each [len(scales)]}, plus "scales"."""
        clean, corrupted = self.clean_and_corrupted()
        labels, metric = self.labels(clean), self.diff_metric(clean, corrupted)
        paths = self.module_paths()
        _, clean_acts = self.activations(clean, paths)
        _, bad_acts = self.activations(corrupted, paths)
        scales = jnp.asarray(self.params["scales"], jnp.float32)
        given = self.params["direction"]
        out: dict[str, Any] = {"scales": scales}
        for path in paths:
            direction = (jnp.mean(clean_acts[path] - bad_acts[path], axis=0) if given is None
                         else jnp.asarray(given, clean_acts[path].dtype))

            def steered(scale: jax.Array, p: str = path, d: jax.Array = direction) -> dict[str, jax.Array]:
                output = self.forward(clean, {p: lambda y: y + scale * d})
                return {**self.loss_accuracy(output, labels), "logit_diff": metric(output)}

            out[root_label(path)] = jax.vmap(steered)(scales)
        return out

    def plot(self, results: dict[str, Any]) -> Any:
        """Logit difference against scale, one line per path."""
        scales = np.asarray(results["scales"])
        curves = {path: np.asarray(r["logit_diff"]) for path, r in results.items() if path != "scales"}
        return self.line(scales, curves, title=f"Steering at {self.node}", xlabel="scale", ylabel="logit diff")
