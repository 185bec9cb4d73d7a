"""Features followed across a lineage's checkpoints, recorded on a node: the op `feature_tracks` reads dictionaries
trained separately at successive checkpoints of one run (each a dictionary job's node), chains their latents by
decoder matching (dictionaries/matching.py) and saves one row per feature and step (NAME.parquet) with a summary
(NAME.json: the dictionaries, their steps, how many features are born and die at each step)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ..dictionaries import Track, feature_tracks
from ..dictionaries.crosscoder import lineage_inputs
from ..errors import UsageError
from ..store import Node
from .ops import SummaryTableOp
from .sources import node_dictionaries

COLUMNS = ("track", "step", "latent", "similarity", "birth", "death")


def checkpoint_read(store: Any, dictionary: Node) -> Node:
    """The one checkpoint a dictionary job's node was trained on: its lineage's first node's parent (through
    branches of dictionary runs)."""
    read = lineage_inputs(store, store.get(dictionary).node, dictionary.name)
    if len(read) != 1:
        raise UsageError(f"feature_tracks: {dictionary} read {len(read)} checkpoints; tracks follow dictionaries "
                         "each trained on one checkpoint (a crosscoder's latents already share one index: read its "
                         "crosscoder.parquet)")
    return read[0]


def track_rows(tracks: Sequence[Track]) -> dict[str, np.ndarray]:
    """The table: a row per feature and step it lives at (similarity to its latent at the step before, NaN at its
    birth; death -1 for a feature alive at the last step)."""
    rows: list[tuple[int, int, int, float, int, int]] = []
    for index, track in enumerate(tracks):
        links = (float("nan"), *track.similarity)
        death = -1 if track.death is None else track.death
        rows.extend((index, step, latent, link, track.birth, death)
                    for (step, latent), link in zip(track.latents.items(), links))
    columns = list(zip(*rows)) if rows else [()] * len(COLUMNS)
    types = (np.int64, np.int64, np.int64, np.float64, np.int64, np.int64)
    return {name: np.asarray(values, dtype) for name, values, dtype in zip(COLUMNS, columns, types)}


def track_summary(tracks: Sequence[Track], steps: Sequence[int]) -> dict[str, Any]:
    """How many features there are, how many are born and die at each step, and how many live at the last."""
    born = {str(s): sum(t.birth == s for t in tracks) for s in steps}
    died = {str(s): sum(t.death == s for t in tracks) for s in steps[1:]}
    return {"tracks": len(tracks), "alive_at_last": sum(t.death is None for t in tracks), "born": born,
            "died": died}


class FeatureTracks(SummaryTableOp):
    """Dictionaries trained separately at successive checkpoints of one run, their latents matched into tracks
    (birth, death, similarity over steps); the table goes onto the node it runs on (docs/lineage.md)."""

    NAME = "feature_tracks"
    COLUMNS = COLUMNS  # one row per feature and step it lives at
    PARAMS: ClassVar[Mapping[str, Any]] = {"dictionaries": None, "threshold": 0.7, "layer": 0}

    def compute(self, batch: Any = None, key: Any = None) -> dict[str, Any]:
        """The table's columns, and under `summary` what was matched (plot() saves it as NAME.json)."""
        p = self.analysis_inputs
        given = p["dictionaries"]
        if isinstance(given, str) or not isinstance(given, Sequence) or len(given) < 2:
            raise UsageError(f"{self.NAME} needs dictionaries=[NODE,NODE,...]: two or more dictionary jobs' nodes, "
                             "each trained on a checkpoint of one run, e.g. dictionaries=[grokking.sae@1a2b3c:200,"
                             f"grokking.sae@4d5e6f:200]; got {given!r}")
        nodes = [Node.coerce(str(n)) for n in given]
        read = {node: checkpoint_read(self.store, node) for node in nodes}
        runs = sorted({f"{c.name}@{c.nonce}" for c in read.values()})
        if len(runs) != 1:
            raise UsageError(f"{self.NAME}: the dictionaries read checkpoints of {len(runs)} runs ({', '.join(runs)});"
                             " tracks follow one run's checkpoints")
        ordered = sorted(nodes, key=lambda n: read[n].seq)
        steps = [read[n].seq for n in ordered]
        if len(set(steps)) != len(steps):
            raise UsageError(f"{self.NAME}: two dictionaries read one checkpoint (steps {steps}); give one per step")
        layer = int(p["layer"])
        decoders = [self._layer(node, layer) for node in ordered]
        tracks = feature_tracks(decoders, steps, threshold=float(p["threshold"]))
        summary = {"dictionaries": [str(n) for n in ordered], "steps": steps, "layer": layer,
                   "threshold": float(p["threshold"]), "table": f"{self.NAME}.parquet", **track_summary(tracks, steps)}
        return {**track_rows(tracks), "summary": summary}

    def _layer(self, node: Node, layer: int) -> Any:
        dictionaries = node_dictionaries(str(node), self.store)
        if not 0 <= layer < len(dictionaries):
            raise UsageError(f"{self.NAME}: layer={layer}, but {node} holds {len(dictionaries)} dictionaries "
                             f"(layers 0 to {len(dictionaries) - 1})")
        return dictionaries[layer]
