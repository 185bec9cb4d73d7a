"""Concept direction: the normalized difference of class-conditional means of one path's activations, and the
projection of each example on it (a table: one row per example)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import numpy as np

from ...errors import UsageError
from .base import OpAnalysis, layer_output


def concept_direction(acts: np.ndarray, positive: np.ndarray) -> np.ndarray:
    """mean(acts | positive) - mean(acts | not positive), scaled to unit length; acts [examples, units]."""
    counts = int(positive.sum()), int((~positive).sum())
    if 0 in counts:
        raise UsageError(f"concept_direction needs examples of both classes in the batch, got {counts[0]} positive "
                         f"and {counts[1]} negative; choose params positive=<a label present> or a bigger batch")
    diff = acts[positive].mean(axis=0) - acts[~positive].mean(axis=0)
    return (diff / max(float(np.linalg.norm(diff)), np.finfo(np.float32).tiny)).astype(np.float32)


class ConceptDirection(OpAnalysis):
    """One path (default: the last block; names_filter picks another), at sequence `position`: the unit direction
    separating examples whose `label_key` field equals `positive` from the rest, and each example's projection on
    it. `positive=None`: 0/1 labels as they are; other labels split at the batch's most frequent label.

    The direction is computed per batch, or taken from `analysis_inputs={"direction": ...}`; in table mode
    each row is one example: projection and label.
    """

    NAME = "concept_direction"
    DEFAULT_FILTER = ("blocks_*", "**/blocks_*", "blocks/*", "**/blocks/*")
    SCHEMA: ClassVar[Mapping[str, Any]] = {"projection": "float32", "label": "int32"}
    PARAMS: ClassVar[Mapping[str, Any]] = {"label_key": "labels", "positive": None, "position": -1}

    def select(self, paths: list[str]) -> str:
        """The last path matching the default filter: the last block."""
        return super().select(paths)[-1]

    def analyze(self, layer: Any, inputs: Any) -> dict[str, jax.Array]:
        """The path's output at `position`, one vector per example: [examples, units]."""
        output = layer_output(layer, inputs)
        return {"activations": output[:, self.params["position"]] if output.ndim > 2 else output}

    def compute(self, batch: Mapping[str, Any] | None = None, key: Any = None) -> dict[str, np.ndarray]:
        """Activations captured in one compiled trace; direction and projections in NumPy from the batch labels."""
        batch = self.analysis_batch() if batch is None else batch
        acts = np.asarray(super().compute(batch, key)["activations"], dtype=np.float32)
        label_key = self.params["label_key"]
        if label_key not in batch:
            raise UsageError(f"concept_direction reads labels from batch field {label_key!r}, which the batch lacks; "
                             f"fields: {', '.join(batch)} (set params label_key=...)")
        labels = np.asarray(batch[label_key]).astype(np.int64)[: len(acts)]
        positive = self.params["positive"]
        if positive is None:
            positive = 1 if set(np.unique(labels)) <= {0, 1} else int(np.bincount(labels - labels.min()).argmax()
                                                                       + labels.min())
        is_positive = labels == positive
        given = self.analysis_inputs.get("direction")
        direction = concept_direction(acts, is_positive) if given is None else np.asarray(given, np.float32)
        return {"direction": direction, "projection": acts @ direction,
                "label": is_positive.astype(np.int32), "activations": acts}

    def columns(self, results: Mapping[str, Any], batch: Mapping[str, Any]) -> dict[str, Any]:
        """Table columns: each example's projection and its class (1 positive, 0 the rest)."""
        return {"projection": results["projection"], "label": results["label"]}

    def plot(self, dataset: Any) -> Any:
        """Each example's projection against its class."""
        projection, label = np.asarray(dataset["projection"]), np.asarray(dataset["label"])
        return self.scatter(projection, label.astype(np.float32), c=label.astype(np.float32),
                            title=f"Concept direction at {self.node}", xlabel="projection",
                            ylabel="class (1: positive)")
