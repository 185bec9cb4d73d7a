"""Attribution graphs over per-layer transcoders, circuit-tracer's method in JAX (docs/attribution.md)."""

from .graph import AttributionGraph, Attributor, select_logits
from .influence import Pruned, graph_scores, prune, total_influence
from .ops import graph_of, replacement_model
from .protocols import CleanPass, Readout, ReplacementModel, Transcoder
from .reference import ReferenceTransformer
from .sources import load_transcoders
from .verify import edge_errors

__all__ = ["Attributor", "AttributionGraph", "CleanPass", "Pruned", "Readout", "ReferenceTransformer",
           "ReplacementModel", "Transcoder", "edge_errors", "graph_of", "graph_scores", "load_transcoders", "prune",
           "replacement_model", "select_logits", "total_influence"]
