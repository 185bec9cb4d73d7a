"""Weight spectrum: singular values of the kernels of selected modules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from ...capture import CaptureError
from .base import OpAnalysis, root_label


def kernel_matrix(layer: Any, kernel: jax.Array) -> jax.Array:
    """A kernel as an [inputs, outputs] matrix: DenseGeneral's `axis` gives the input dims, else all but the last."""
    if kernel.ndim <= 2:
        return kernel.reshape(kernel.shape[0], -1) if kernel.ndim == 2 else kernel[None]
    axis = getattr(layer, "axis", None)
    n_in = len(axis) if isinstance(axis, (tuple, list)) else 1 if isinstance(axis, int) else kernel.ndim - 1
    rows = int(np.prod(kernel.shape[:n_in]))
    return kernel.reshape(rows, -1)


class WeightSpectrum(OpAnalysis):
    """Singular values (descending) of each selected module's `kernel` parameter; modules without one are skipped."""

    NAME = "weight_spectrum"
    PARAMS: ClassVar[Mapping[str, Any]] = {"top": 0}

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, jax.Array]:
        """{path/kernel: singular values}, the `top` largest when top > 0."""
        out = {}
        for path, layer, _ in self.by_path(layers, inputs):
            kernel = self.capturer.backend.parameters(layer).get("kernel")
            if kernel is None:
                continue
            values = jnp.linalg.svd(kernel_matrix(layer, kernel).astype(jnp.float32), compute_uv=False)
            top = int(self.params["top"])
            out[f"{root_label(path)}/kernel"] = values[:top] if top > 0 else values
        if not out:
            raise CaptureError(f"none of the selected modules {self.selected} has a 'kernel' parameter; "
                               "select Dense-like modules with names_filter")
        return out

    def plot(self, results: dict[str, np.ndarray]) -> Any:
        """Singular values per kernel (log scale), padded with NaN to a common length."""
        width = max(len(v) for v in results.values())
        series = {k: np.pad(np.asarray(v, np.float64), (0, width - len(v)), constant_values=np.nan)
                  for k, v in results.items()}
        return self.line(None, series, title=f"Weight spectrum at {self.node}", xlabel="index", ylabel="singular value",
                         logy=True)
