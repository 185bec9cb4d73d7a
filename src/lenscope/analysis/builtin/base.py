"""OpAnalysis: the base of general analyses that mix into any trainer (parameters, default path selection)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from ...capture import CaptureError, format_paths, match_paths
from ..base import AnalysisBase
from ..json_bytes import to_json_bytes
from ..made_by import json_values, naming_class, provenance


def root_label(path: str) -> str:
    """A path as a result key: the root '' reads '(root)'."""
    return path if path else "(root)"


def token_label(token: str) -> str:
    """A token as Matplotlib shows it literally: `$` escaped (never mathtext), line breaks and tabs written out, and
    a token of spaces only as open boxes (it would show nothing)."""
    text = str(token).replace("$", r"\$").replace("\n", r"\n").replace("\r", r"\r").replace("\t", r"\t")
    return text.replace(" ", "\u2423") if text and not text.strip(" ") else text


MAX_LISTED = 1 << 16  # numbers of one array written out in an op's JSON; a bigger array is summarized


def numbers(results: Any) -> Any:
    """An op's results as JSON: arrays as nested lists (one of more than MAX_LISTED numbers as its shape, mean,
    min and max), a 0-d array as its number, NaN and inf as None."""
    if isinstance(results, dict):
        return {str(key): numbers(value) for key, value in results.items()}
    if isinstance(results, (list, tuple)):
        return [numbers(value) for value in results]
    if isinstance(results, (np.ndarray, np.generic, jax.Array)):
        array = np.asarray(results)
        if array.size > MAX_LISTED and array.dtype.kind in "biuf":
            finite = array[np.isfinite(array)] if array.dtype.kind == "f" else array
            summary = (float(finite.mean()), float(finite.min()), float(finite.max())) if finite.size else (None,) * 3
            return {"shape": list(array.shape), **dict(zip(("mean", "min", "max"), map(numbers, summary)))}
        return numbers(array.tolist()) if array.ndim else numbers(array.item())
    if isinstance(results, float) and not math.isfinite(results):
        return None
    return results


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
    _analyzed: Any = None  # the batch last analyzed: its first example is the prompt the figures label

    def _compute(self, batch: Any, key: Any) -> Any:
        """Analyze `batch` (None: the analysis batch), kept for the figures' token labels."""
        self._analyzed = self.analysis_batch() if batch is None else batch
        return super()._compute(self._analyzed, key)

    def prompt_tokens(self) -> list[str] | None:
        """The analyzed prompt's tokens (the batch's first example) as text escaped for Matplotlib, where the trainer
        reads tokens as text (`token_strings`, as a language model does); else None."""
        strings = getattr(self, "token_strings", None)
        if not callable(strings):
            return None
        ids = self.model_inputs(self._analyzed if self._analyzed is not None else self.analysis_batch())[0]
        if not isinstance(ids, (np.ndarray, jax.Array)) or ids.ndim != 2 or not jnp.issubdtype(ids.dtype, jnp.integer):
            return None
        if isinstance(ids, jax.Array) and not ids.is_fully_addressable:  # another process holds the first row
            return None
        return [token_label(t) for t in strings(np.asarray(ids[0]))]

    def position_axis(self, count: int, name: str = "position") -> tuple[str, list[str]]:
        """(axis label, tick labels) of `count` sequence positions: the prompt's tokens where it has as many, else the
        position numbers."""
        tokens = self.prompt_tokens()
        if tokens is not None and len(tokens) == count:
            return f"{name} (example 0)", tokens
        return name, [str(i) for i in range(count)]

    def select(self, paths: list[str]) -> list[str]:
        """Paths matching DEFAULT_FILTER (every non-root path without one), plus REQUIRED_PATHS."""
        chosen = [p for p in paths if p] if self.DEFAULT_FILTER is None else match_paths(self.DEFAULT_FILTER, paths)
        if not chosen:
            kinds = self.capturer.backend.check_target(self.TARGET)  # TARGET's classes of the model's library
            wanted = f"its default filter {self.DEFAULT_FILTER!r}" if self.DEFAULT_FILTER else "a non-root path"
            raise CaptureError(f"{type(self).__name__}: no discovered {' or '.join(k.__name__ for k in kinds)} call "
                               f"has {wanted}; discovered: {format_paths(paths)} (set names_filter to choose)")
        return chosen + [p for p in self.REQUIRED_PATHS if p not in chosen and p in paths]

    def publish(self, results: Any) -> Path | None:
        """The plot (a figure: NAME.pdf), and beside a figure the numbers it shows: NAME.json (artifact NAME.json),
        its scalar leaves recorded as values `analysis/NAME/...`."""
        path = super().publish(results)
        if path is not None and path.suffix == ".pdf" and self.output_schema() is None:
            plain = numbers(results)
            self.lineage.save(path.with_suffix(".json"), f"{self.NAME}.json", to_json_bytes(plain),
                              provenance=provenance(naming_class(type(self))),
                              other_class=self.args.analysis_other_class)
            self.lineage.record(json_values(self.NAME, plain))
        return path

    def by_path(self, layers: list[Any], inputs: list[Any]) -> list[tuple[str, Any, Any]]:
        """(path, layer, inputs) triples of a list selection, in selection order."""
        return list(zip(self.selected, layers, inputs, strict=True))
