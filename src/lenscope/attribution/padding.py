"""Shape buckets of attribution graphs: a prompt padded on the right to its length bucket, so that prompts of several
lengths reuse one setup program and one edge program per layer group.

A model that declares `max_positions` (the ReplacementModel Protocol's optional attribute: it is causal, so its real
positions never see what is padded after them) has a prompt of n tokens run at `bucket(n, MIN_LENGTH,
max_positions)` positions (the language-model facade's length buckets, models/pretrained/buckets.py); the padded
positions get no feature or error nodes and their columns are cut from every row. No program shape depends on the
prompt's active features: the edge program returns site gradients and the features' columns are taken on the host
(feature_columns.py), so a prompt with more features than any before it compiles nothing.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..models.pretrained.buckets import MIN_LENGTH, bucket


def padded_length(model: Any, n_pos: int, buckets: bool = True) -> int:
    """The positions an `n_pos`-token prompt runs at: its bucket for a model with `max_positions`, else `n_pos`."""
    if not buckets or not hasattr(model, "max_positions"):
        return n_pos
    return bucket(n_pos, MIN_LENGTH, model.max_positions)


class Cut(NamedTuple):
    """Which columns of a padded row of error and token entries [(n_layers + 1) * width] are the real graph's."""

    n_layers: int
    n_pos: int
    width: int

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        """Rows [B, (n_layers + 1) * width] back to the real positions' columns: errors layer-major, tokens."""
        if self.width == self.n_pos:
            return rows
        return rows.reshape(len(rows), self.n_layers + 1, self.width)[:, :, : self.n_pos].reshape(len(rows), -1)
