"""Checks of an attribution graph file before the graph page lays it out: its size, its shape, and every count the
layout allocates by (layers, positions, nodes, links) bounded by the graph's own prompt and model.

A graph that fails gets the not-found page naming the first problem (`GraphError`), never a layout.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_GRAPH_BYTES = 8 << 20  # a graph file the page parses; a larger one is refused unread (download it instead)
MAX_NODES = 10_000
MAX_LINKS = 50_000
MAX_LAYERS = 1_000  # a graph without logit nodes, or with one at a deeper layer, is no model's graph
MAX_POSITIONS = 8_192  # a graph without prompt tokens
KEYS = ("metadata", "qParams", "nodes", "links")
KINDS = ("embedding", "logit", "mlp reconstruction error", "cross layer transcoder")


class GraphError(ValueError):
    """An attribution graph file the graph page cannot draw: why, in one line."""


def parse_graph(data: bytes) -> dict[str, Any] | None:
    """The parsed graph file, or None when `data` is no attribution graph file (not JSON, too deep, other keys)."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to parse (then not a graph file either)
        return None
    return document if isinstance(document, dict) and set(document) >= set(KEYS) else None


def _int(value: Any, what: str, low: int, high: int) -> int:
    """`value` as an integer in [low, high] (an int, or a string of digits as circuit-tracer writes layers)."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) <= 12:
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise GraphError(f"{what} is {value!r}: expected an integer from {low} to {high}")
    if not low <= value <= high:
        raise GraphError(f"{what} is {value}: expected an integer from {low} to {high}")
    return value


def _number(value: Any, what: str, optional: bool = True) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise GraphError(f"{what} is {value!r}: expected a finite number")


def _text(value: Any, what: str, optional: bool = False) -> None:
    if not (isinstance(value, str) or (optional and value is None)):
        raise GraphError(f"{what} is {value!r}: expected a string")


def check_graph(document: dict[str, Any]) -> None:
    """GraphError naming the first thing of `document` the layout cannot trust; None when it may be drawn."""
    metadata, nodes, links = document["metadata"], document["nodes"], document["links"]
    if not isinstance(metadata, dict):
        raise GraphError(f"metadata is a {type(metadata).__name__}: expected an object")
    for key, value, cap in (("nodes", nodes, MAX_NODES), ("links", links, MAX_LINKS)):
        if not isinstance(value, list):
            raise GraphError(f"{key} is a {type(value).__name__}: expected a list")
        if len(value) > cap:
            raise GraphError(f"{len(value)} {key}: the graph page draws at most {cap} (download the file instead)")
    prompt = metadata.get("prompt_tokens", [])
    if not isinstance(prompt, list) or len(prompt) > MAX_POSITIONS or not all(isinstance(t, str) for t in prompt):
        raise GraphError(f"metadata.prompt_tokens: expected a list of at most {MAX_POSITIONS} strings")
    _text(metadata.get("scan", ""), "metadata.scan")
    positions = len(prompt) or MAX_POSITIONS
    for i, node in enumerate(nodes):
        if not isinstance(node, dict):
            raise GraphError(f"nodes[{i}] is {node!r}: expected an object")
        missing = [k for k in ("node_id", "feature_type", "layer", "ctx_idx") if k not in node]
        if missing:
            raise GraphError(f"nodes[{i}] lacks {', '.join(missing)}")
        _text(node["node_id"], f"nodes[{i}].node_id")
        if node["feature_type"] not in KINDS:
            raise GraphError(f"nodes[{i}].feature_type is {node['feature_type']!r}: expected one of "
                             f"{', '.join(map(repr, KINDS))}")
        _int(node["ctx_idx"], f"nodes[{i}].ctx_idx", 0, positions - 1)
        _text(node.get("clerp", ""), f"nodes[{i}].clerp", optional=True)
        for key in ("activation", "influence"):
            _number(node.get(key), f"nodes[{i}].{key}")
        if node["feature_type"] == "cross layer transcoder":
            parts = node["node_id"].split("_")
            _int(parts[1] if len(parts) > 1 else None, f"nodes[{i}].node_id's feature", 0, 2**63 - 1)
    _check_layers(nodes)
    for i, link in enumerate(links):
        if not isinstance(link, dict) or not {"source", "target", "weight"} <= set(link):
            raise GraphError(f"links[{i}] is {str(link)[:80]!r}: expected an object of source, target, weight")
        _text(link["source"], f"links[{i}].source")
        _text(link["target"], f"links[{i}].target")
        _number(link["weight"], f"links[{i}].weight", optional=False)


def _check_layers(nodes: list[dict[str, Any]]) -> None:
    """Logit nodes on one layer (the model's depth plus one), at most MAX_LAYERS + 1; other layers below it."""
    logits = {_int(n["layer"], f"the logit node {n['node_id']!r}'s layer", 1, MAX_LAYERS + 1)
              for n in nodes if n["feature_type"] == "logit"}
    if len(logits) > 1:
        raise GraphError(f"logit nodes on layers {sorted(logits)}: expected one layer (the model's depth plus one)")
    depth = next(iter(logits)) - 1 if logits else MAX_LAYERS
    for n in nodes:
        if n["feature_type"] not in ("logit", "embedding"):
            _int(n["layer"], f"node {n['node_id']!r}'s layer", 0, depth - 1)
