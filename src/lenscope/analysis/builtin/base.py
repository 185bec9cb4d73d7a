"""OpAnalysis: the base of general analyses that mix into any trainer (parameters, default path selection)."""

from __future__ import annotations

from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from ...capture import CaptureError, format_paths, match_paths
from ..base import AnalysisBase


def root_label(path: str) -> str:
    """A path as a result key: the root '' reads '(root)'."""
    return path if path else "(root)"


def layer_output(layer: Any, inputs: Any) -> jax.Array:
    """Re-run a captured layer on its inputs and return its output array (the first array of a tuple output)."""
    output = inputs.call(layer)
    for leaf in jax.tree_util.tree_leaves(output):
        if isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jnp.inexact):
            return leaf
    raise CaptureError(f"the layer {type(layer).__name__} returned no floating-point array to analyze")


class OpAnalysis(AnalysisBase):
    """A general analysis: PARAMS (set through AnalysisCfg.params or op keywords) and DEFAULT_FILTER globs."""

    DEFAULT_FILTER: ClassVar[str | tuple[str, ...] | None] = None  # None: every discovered path but the root
    REQUIRED_PATHS: ClassVar[tuple[str, ...]] = ()

    def select(self, paths: list[str]) -> list[str]:
        """Paths matching DEFAULT_FILTER (every non-root path without one), plus REQUIRED_PATHS."""
        chosen = [p for p in paths if p] if self.DEFAULT_FILTER is None else match_paths(self.DEFAULT_FILTER, paths)
        if not chosen:
            kinds = self.capturer.backend.check_target(self.TARGET)  # TARGET's classes of the model's library
            wanted = f"its default filter {self.DEFAULT_FILTER!r}" if self.DEFAULT_FILTER else "a non-root path"
            raise CaptureError(f"{type(self).__name__}: no discovered {' or '.join(k.__name__ for k in kinds)} call "
                               f"has {wanted}; discovered: {format_paths(paths)} (set names_filter to choose)")
        return chosen + [p for p in self.REQUIRED_PATHS if p not in chosen and p in paths]

    def by_path(self, layers: list[Any], inputs: list[Any]) -> list[tuple[str, Any, Any]]:
        """(path, layer, inputs) triples of a list selection, in selection order."""
        return list(zip(self.selected, layers, inputs, strict=True))
