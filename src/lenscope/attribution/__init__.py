"""Attribution graphs over per-layer transcoders, circuit-tracer's method in JAX (docs/attribution.md)."""

from .compare import Correspondence, compare_graphs, latent_correspondence
from .compare_op import Comparison, compare_graph_files
from .graph import AttributionGraph, Attributor, select_logits
from .influence import Pruned, graph_scores, prune, total_influence
from .ops import graph_of, replacement_model
from .protocols import CleanPass, Readout, ReplacementModel, Transcoder
from .reference import ReferenceTransformer
from .sources import load_transcoders
from .verify import edge_errors

__all__ = ["Attributor", "AttributionGraph", "CleanPass", "Comparison", "Correspondence", "Pruned", "Readout",
           "ReferenceTransformer", "ReplacementModel", "Transcoder", "compare_graph_files", "compare_graphs",
           "edge_errors", "graph_of", "graph_scores", "latent_correspondence", "load_transcoders", "prune",
           "replacement_model", "select_logits", "total_influence"]
