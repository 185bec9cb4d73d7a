"""Activation patching and its first-order estimate (attribution patching), layers x positions, one program each."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..patch_sweeps import correlation, normalized, position_chunk, position_sweep, set_head, sweep
from .base import root_label
from .intervention_op import BLOCKS, HEADS, MODULES, InterventionOp


class ActivationPatching(InterventionOp):
    """Patch each selected path's output from the clean run into the corrupted one, at each position
    (`attn/out` paths: at each head), and score the normalized logit difference (1: clean, 0: corrupted)."""

    NAME = "activation_patching"
    DEFAULT_FILTER = (*BLOCKS, *MODULES, *HEADS)

    def runs(self) -> tuple[Any, ...]:
        """(corrupted batch, clean activations by path, clean inputs of head paths, metric, clean, corrupted)."""
        clean, corrupted = self.clean_and_corrupted()
        metric = self.diff_metric(clean, corrupted)
        clean_out, acts = self.activations(clean, self.module_paths())
        heads = {}
        if self.head_paths():
            _, recorded = self.activations(clean, self.head_paths(), on="inputs")
            heads = {path: next(iter(x.values())) for path, x in recorded.items()}  # [..., heads, d_head]
        return corrupted, acts, heads, metric, metric(clean_out), metric(self.forward(corrupted))

    def exact(self) -> dict[str, jax.Array]:
        """{"positions": [paths, seq], "heads": [head paths, heads] (when selected), "clean", "corrupted"}."""
        corrupted, acts, heads, metric, clean, bad = self.runs()

        def score(patch: Any, on: str = "output") -> jax.Array:
            return normalized(metric(self.answer_forward(corrupted, patch, on)), clean, bad)

        out = {"clean": clean, "corrupted": bad}
        if acts:  # block outputs as one packed sweep where the model allows, the other paths patch by patch
            rows = self.position_rows(corrupted, acts, int(self.params["position"]),
                                      lambda logits: normalized(metric(logits), clean, bad))
            rest, first = [path for path in acts if path not in rows], next(iter(acts.values()))
            if rest:
                rows.update(zip(rest, position_sweep(score, rest, acts, first.shape[1], position_chunk(first))))
            out["positions"] = jnp.stack([rows[path] for path in acts])
        if heads:
            count = next(iter(heads.values())).shape[-2]
            out["heads"] = sweep(lambda patch: score(patch, "inputs"), list(heads),
                                 lambda p, h: set_head(heads[p], h), count)
        return out

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, jax.Array]:
        """The exact patching grids (every patch is one forward pass, all in one compiled program)."""
        return self.exact()

    def plot(self, results: dict[str, np.ndarray]) -> Any:
        """Heatmap paths x positions of the normalized logit difference."""
        grid = results.get("positions", results.get("heads"))
        paths = self.module_paths() if "positions" in results else self.head_paths()
        if "positions" in results:
            xlabel, ticks = self.position_axis(grid.shape[1])
        else:
            xlabel, ticks = "head", list(range(grid.shape[1]))
        return self.heatmap(grid, title=f"Activation patching at {self.node}", xlabel=xlabel, ylabel="path",
                            xticklabels=ticks, yticklabels=[root_label(p) for p in paths],
                            cmap="RdBu", vmin=-1, vmax=1, cbar_label="normalized logit diff")


class AttributionPatching(ActivationPatching):
    """The first-order estimate of the patching grid from one forward and one backward pass on the corrupted
    batch: gradient x (clean - corrupted activation), summed per position; with its correlation to the exact grid."""

    NAME = "attribution_patching"
    DEFAULT_FILTER = (*BLOCKS, *MODULES)

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, jax.Array]:
        """{"attribution", "exact", "correlation"} over paths x positions."""
        clean, corrupted = self.clean_and_corrupted()
        metric = self.diff_metric(clean, corrupted)
        paths = self.module_paths()
        clean_out, clean_acts = self.activations(clean, paths)
        bad, bad_acts, grads = self.gradients(corrupted, paths, metric)
        scale = metric(clean_out) - bad
        estimate = jnp.stack([
            jnp.sum(grads[p] * (clean_acts[p] - bad_acts[p]), axis=tuple(a for a in range(grads[p].ndim) if a != 1))
            for p in paths]) / jnp.where(scale == 0, 1.0, scale)
        exact = self.exact()["positions"]
        return {"attribution": estimate, "exact": exact, "correlation": correlation(estimate, exact)}

    def plot(self, results: dict[str, np.ndarray]) -> Any:
        """The estimate and the exact grid side by side."""
        labels = [root_label(p) for p in self.module_paths()]
        xlabel, ticks = self.position_axis(results["exact"].shape[1])
        return self.heatmaps([results["attribution"], results["exact"]], ["attribution (first order)", "exact"],
                             title=f"Attribution patching (r = {float(results['correlation']):.3f})",
                             xlabel=xlabel, ylabel="path", xticklabels=ticks, yticklabels=labels, cmap="RdBu")
