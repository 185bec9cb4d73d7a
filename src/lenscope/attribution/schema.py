"""An attribution graph as circuit-tracer's JSON graph file (its frontend and Neuronpedia-style tools open it) and
as a compact node table.

The field names and id formats follow circuit-tracer 0.5's `frontend.graph_models` (Metadata, QParams, Node,
Link, Model); tests validate the output with those pydantic models.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .graph import AttributionGraph
from .influence import Pruned

TokenText = Callable[[int], str]


def cantor(x: int, y: int) -> int:
    """The Cantor pairing of two non-negative integers (circuit-tracer's feature id of (layer, feature))."""
    return (x + y) * (x + y + 1) // 2 + y


def _node(node_id: str, feature: int, layer: str, ctx_idx: int, feature_type: str, js_id: str, *,
          influence: float | None = None, activation: float | None = None, token_prob: float = 0.0,
          is_target_logit: bool = False, clerp: str = "") -> dict[str, Any]:
    return {"node_id": node_id, "feature": int(feature), "layer": layer, "ctx_idx": int(ctx_idx),
            "feature_type": feature_type, "token_prob": float(token_prob), "is_target_logit": bool(is_target_logit),
            "run_idx": 0, "reverse_ctx_idx": 0, "jsNodeId": js_id, "clerp": clerp,
            "influence": None if influence is None else float(influence),
            "activation": None if activation is None else float(activation)}


def graph_nodes(graph: AttributionGraph, pruned: Pruned, token_text: TokenText) -> dict[int, dict[str, Any]]:
    """The kept nodes by adjacency index, as circuit-tracer's Node records."""
    n_feat, n_pos, n_layers = graph.n_features, graph.n_pos, graph.n_layers
    error_end = n_feat + n_layers * n_pos
    token_end = error_end + n_pos
    nodes = {}
    for index in np.flatnonzero(pruned.node_mask).tolist():
        influence = float(pruned.cumulative[index])
        if index < n_feat:
            active = graph.selected_features[index]
            layer, pos, feat = (int(v) for v in graph.active_features[active])
            nodes[index] = _node(f"{layer}_{feat}_{pos}", cantor(layer, feat), str(layer), pos,
                                 "cross layer transcoder", f"{layer}_{feat}-0", influence=influence,
                                 activation=float(graph.activation_values[active]))
        elif index < error_end:
            layer, pos = divmod(index - n_feat, n_pos)
            nodes[index] = _node(f"0_{layer}_{pos}", -1, str(layer), pos, "mlp reconstruction error",
                                 f"{layer}_{pos}-0", influence=influence)
        elif index < token_end:
            pos = index - error_end
            vocab = int(graph.input_tokens[pos])
            nodes[index] = _node(f"E_{vocab}_{pos}", pos, "E", pos, "embedding", f"E_{vocab}-{pos}",
                                 influence=influence)
        else:
            k = index - token_end
            vocab, prob = int(graph.logit_targets[k]), float(graph.logit_probabilities[k])
            layer = str(n_layers + 1)
            nodes[index] = _node(f"{layer}_{vocab}_{n_pos - 1}", vocab, layer, n_pos - 1, "logit",
                                 f"L_{vocab}-{n_pos - 1}", token_prob=prob, is_target_logit=k == 0,
                                 clerp=f'Output "{token_text(vocab)}" (p={prob:.3f})')
    return nodes


def graph_links(graph: AttributionGraph, pruned: Pruned,
                nodes: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The kept edges between kept nodes as {source, target, weight}; none of weight zero (an edge threshold of 1.0
    keeps every edge, the structurally absent ones included: a feature does not feed its own layer)."""
    targets, sources = np.nonzero(pruned.edge_mask & (graph.adjacency != 0))
    return [{"source": nodes[s]["node_id"], "target": nodes[t]["node_id"], "weight": float(graph.adjacency[t, s])}
            for t, s in zip(targets.tolist(), sources.tolist()) if s in nodes and t in nodes]


def graph_json(graph: AttributionGraph, pruned: Pruned, token_text: TokenText, *, slug: str, scan: str,
               node_threshold: float, transcoder_list: Sequence[str] = ()) -> dict[str, Any]:
    """circuit-tracer's graph file: metadata, qParams, the kept nodes (connected, or tokens and logits), links."""
    nodes = graph_nodes(graph, pruned, token_text)
    links = graph_links(graph, pruned, nodes)
    connected = {link["source"] for link in links} | {link["target"] for link in links}
    used = [node for node in nodes.values()
            if node["node_id"] in connected or node["feature_type"] in ("embedding", "logit")]
    tokens = [token_text(int(t)) for t in graph.input_tokens]
    return {
        "metadata": {"slug": slug, "scan": scan, "transcoder_list": list(transcoder_list), "prompt_tokens": tokens,
                     "prompt": " ".join(tokens), "node_threshold": float(node_threshold), "schema_version": 1},
        "qParams": {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""},
        "nodes": used,
        "links": links,
    }


def node_index(node: dict[str, Any]) -> int:
    """A node's own index: the transcoder feature of a feature node, the token or output id of a token or logit
    node, -1 for an error node (read back from circuit-tracer's node id)."""
    kind, parts = node["feature_type"], node["node_id"].split("_")
    if kind in ("cross layer transcoder", "embedding", "logit"):
        return int(parts[1])
    return -1


def node_table(document: dict[str, Any]) -> dict[str, list]:
    """The compact table of a graph file: one row per kept node (`index`: see node_index) with its incoming kept
    edges (`sources`, `weights`: lists)."""
    incoming: dict[str, list[tuple[str, float]]] = {}
    for link in document["links"]:
        incoming.setdefault(link["target"], []).append((link["source"], link["weight"]))
    names = ("node_id", "feature_type", "layer", "ctx_idx", "feature", "index", "activation", "influence",
             "token_prob", "sources", "weights")
    columns: dict[str, list] = {name: [] for name in names}
    for node in document["nodes"]:
        edges = incoming.get(node["node_id"], [])
        for name in ("node_id", "feature_type", "layer", "ctx_idx", "feature", "token_prob"):
            columns[name].append(node[name])
        columns["index"].append(node_index(node))
        columns["activation"].append(np.nan if node["activation"] is None else node["activation"])
        columns["influence"].append(np.nan if node["influence"] is None else node["influence"])
        columns["sources"].append([s for s, _ in edges])
        columns["weights"].append([w for _, w in edges])
    return columns
