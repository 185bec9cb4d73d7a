"""Shape buckets of attribution graphs: a prompt padded on the right to its length bucket, and its active features to
a capacity, so that prompts of several lengths reuse one setup program and one edge program per layer group.

A model that declares `max_positions` (the ReplacementModel Protocol's optional attribute: it is causal, so its real
positions never see what is padded after them) has a prompt of n tokens run at `bucket(n, MIN_LENGTH,
max_positions)` positions (the language-model facade's length buckets, models/pretrained/buckets.py); the padded
positions get no feature or error nodes and their columns are cut from every row. The edge program also takes the
features grouped by site, whose counts vary per prompt: they are padded to capacities chosen once per padded length
(the prompt's counts extrapolated to the whole bucket, with headroom, rounded up to a quarter octave) and reused by
every later prompt that fits, in this process and, through the ShapeRecord beside the persistent compile cache, in
the next.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from ..models.pretrained.buckets import MIN_LENGTH, bucket
from .shape_record import ShapeRecord

HEADROOM = 1.25  # room above a prompt's feature count extrapolated to its bucket, so the next prompt fits too
# and above its fullest (layer, position): a maximum varies more from prompt to prompt (15 to 27 features on
# bench/first_answer.py's small model), and a slot costs little (one product per site in the edge program)
SLOT_HEADROOM = 2.0


def padded_length(model: Any, n_pos: int, buckets: bool = True) -> int:
    """The positions an `n_pos`-token prompt runs at: its bucket for a model with `max_positions`, else `n_pos`."""
    if not buckets or not hasattr(model, "max_positions"):
        return n_pos
    return bucket(n_pos, MIN_LENGTH, model.max_positions)


def quarter_octave(n: int) -> int:
    """`n` rounded up to the next of 4, 5, 6, 7, 8 times a power of two (steps of at most a quarter)."""
    step = 1 << max(n.bit_length() - 3, 0)
    return -(-n // step) * step


class Cut(NamedTuple):
    """Which columns of a padded row [capacity + (n_layers + 1) * width] are the real graph's sources."""

    n_features: int
    capacity: int
    n_layers: int
    n_pos: int
    width: int

    @property
    def exact(self) -> bool:
        """Whether nothing was padded (a row is the real one)."""
        return self.capacity == self.n_features and self.width == self.n_pos

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        """Rows [B, padded] back to the real graph's columns: features, errors layer-major, tokens."""
        if self.exact:
            return rows
        sites = rows[:, self.capacity:].reshape(len(rows), self.n_layers + 1, self.width)[:, :, : self.n_pos]
        return np.concatenate([rows[:, : self.n_features], sites.reshape(len(rows), -1)], axis=1)


def pad_sources(site: np.ndarray, slot: np.ndarray, grid: np.ndarray, capacity: tuple[int, int]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(site, slot, grid) padded to `capacity` (features, slots per site): the extra features read site 0, slot 0
    (their columns are cut), the extra slots hold zeros."""
    features, slots = capacity
    extra = features - len(site)
    return (np.pad(site, (0, extra)), np.pad(slot, (0, extra)),
            np.pad(grid, ((0, 0), (0, slots - grid.shape[1]), (0, 0))))


class Capacities:
    """The (features, slots per site) capacities the edge programs were compiled for, by padded length, in a
    ShapeRecord (so a second process picks the shapes its compile cache holds)."""

    def __init__(self, record: ShapeRecord, model: str = "") -> None:
        self.record, self.model = record, model

    def choose(self, width: int, n_pos: int, skip: int, features: int, slots: int) -> tuple[int, int]:
        """The smallest capacity already used at `width` that holds `features` and `slots`; else a new one: the
        features extrapolated from the prompt's `n_pos - skip` positions to the bucket's `width - skip` with
        HEADROOM, the slots with SLOT_HEADROOM, each rounded up to a quarter octave."""
        key = f"capacity/{self.model}/{width}"
        fitting = [(int(f), int(s)) for f, s in self.record.get(key) if f >= features and s >= slots]
        if fitting:
            return min(fitting)
        scale = (width - skip) / max(n_pos - skip, 1)
        chosen = (quarter_octave(max(math.ceil(HEADROOM * features * scale), features)),
                  quarter_octave(max(math.ceil(SLOT_HEADROOM * slots), slots)))
        self.record.add(key, list(chosen))
        return chosen
