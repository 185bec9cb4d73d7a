"""A graph file pruned again: circuit-tracer's JSON graph read back into a dense adjacency, pruned by
`influence.prune` at new thresholds, and written back as a graph file (what the UI graph page's sliders show).

The file holds only the nodes and links an earlier pruning kept, so pruning it again prunes further: influence is
recomputed over the file's own links.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .influence import Pruned, prune

ORDER = ("cross layer transcoder", "mlp reconstruction error", "embedding", "logit")  # prune's node order


class FileGraph(NamedTuple):
    """A graph file's nodes in prune's order (features, errors, tokens, logits) and its dense adjacency."""

    nodes: list[dict[str, Any]]
    adjacency: np.ndarray  # [targets, sources]
    probs: np.ndarray  # the logit nodes' token_prob, in node order
    n_features: int
    n_tokens: int


def file_graph(document: dict[str, Any]) -> FileGraph:
    """The nodes and links of a graph file as a FileGraph (a link named twice counts with its last weight; one to a
    node the file lacks, not at all)."""
    nodes = sorted(document["nodes"], key=lambda node: ORDER.index(node["feature_type"]))
    where = {node["node_id"]: i for i, node in enumerate(nodes)}
    adjacency = np.zeros((len(nodes), len(nodes)))
    for link in document["links"]:
        if link["source"] in where and link["target"] in where:
            adjacency[where[link["target"]], where[link["source"]]] = float(link["weight"])
    kinds = [node["feature_type"] for node in nodes]
    probs = np.asarray([float(n.get("token_prob") or 0.0) for n in nodes if n["feature_type"] == "logit"])
    return FileGraph(nodes, adjacency, probs, kinds.count(ORDER[0]), kinds.count("embedding"))


def prune_file(document: dict[str, Any], node_threshold: float, edge_threshold: float) -> dict[str, Any]:
    """The graph file pruned again at `node_threshold` and `edge_threshold` (influence.prune's rule), written as
    graph_json writes one: the kept links of nonzero weight, the kept nodes that one of them touches, every token
    and logit."""
    graph = file_graph(document)
    pruned: Pruned = prune(graph.adjacency, graph.probs, graph.n_features, graph.n_tokens, node_threshold,
                           edge_threshold)
    kept = pruned.node_mask
    targets, sources = np.nonzero(pruned.edge_mask & (graph.adjacency != 0) & kept[:, None] & kept[None, :])
    ids = [node["node_id"] for node in graph.nodes]
    links = [{"source": ids[s], "target": ids[t], "weight": float(graph.adjacency[t, s])}
             for t, s in zip(targets.tolist(), sources.tolist())]
    touched = {link["source"] for link in links} | {link["target"] for link in links}
    nodes = [node for i, node in enumerate(graph.nodes) if kept[i] and (
        node["node_id"] in touched or node["feature_type"] in ("embedding", "logit"))]
    return {**document, "nodes": nodes, "links": links}
