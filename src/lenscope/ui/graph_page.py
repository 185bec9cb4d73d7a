"""An attribution graph file (circuit-tracer's JSON schema) as the graph page's data: the checked file's nodes and
links in compact form for static/graph.js (which lays them out, prunes them again at the page's thresholds and draws
them), its features' dashboard cards, and the graph's replacement and completeness scores.

Only numbers and strings come out of here; the script writes every label as text (never markup).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from lenscope.store import Node, StoreReader
from lenscope.store.schema import nodes as node_rows
from lenscope.store.schema import records
from lenscope.store.values import decode
from lenscope.ui.graph_cards import card_key, dashboard_cards
from lenscope.ui.graph_check import MAX_GRAPH_BYTES, GraphError, check_graph, parse_graph
from lenscope.ui.nodes import ArtifactInfo, Missing, artifact_content, artifact_info, parse_node

KINDS = {"embedding": "token", "logit": "logit", "mlp reconstruction error": "error"}  # else a feature
SCORES = ("replacement_score", "completeness_score")


def is_graph(text: str) -> bool:
    """Whether a JSON artifact's text is an attribution graph file."""
    return parse_graph(text.encode()) is not None


@dataclass
class GraphView:
    """One graph as the page shows it: where it is, its prompt, its scores and the data its script draws."""

    node: Node
    info: ArtifactInfo
    prompt: list[str]
    data: dict[str, Any]
    scores: dict[str, float] = field(default_factory=dict)
    pruned_at: float | None = None  # the node threshold the file was saved at, when its metadata says
    scan: str = ""  # the file's metadata scan: the transcoders' node when the graph was computed with one


def _kind(node: dict[str, Any]) -> str:
    return KINDS.get(node["feature_type"], "feature")


def _depth(nodes: list[dict[str, Any]]) -> int:
    """The model's number of layers: the logit layer minus one, else one past the deepest feature or error."""
    logits = [int(n["layer"]) for n in nodes if n["feature_type"] == "logit"]
    if logits:
        return max(logits) - 1
    return 1 + max((int(n["layer"]) for n in nodes if _kind(n) in ("feature", "error")), default=0)


def _short(node: dict[str, Any], kind: str, label: str) -> str:
    """What is drawn beside a node: a logit's output token, a feature's index."""
    if kind == "logit":  # circuit-tracer's clerp of a logit: Output "TOKEN" (p=0.123)
        return label[8:label.rindex('" (p=')] if label.startswith('Output "') and '" (p=' in label else label
    return node["node_id"].split("_")[1] if kind == "feature" else ""


def _compact(node: dict[str, Any]) -> dict[str, Any]:
    """A node as the script reads it."""
    kind = _kind(node)
    label = node.get("clerp") or node["node_id"]
    out = {"id": node["node_id"], "kind": kind, "pos": int(node["ctx_idx"]), "label": label,
           "short": _short(node, kind, label), "activation": node.get("activation"),
           "influence": node.get("influence")}
    if kind in ("feature", "error"):
        out["layer"] = int(node["layer"])
    if kind == "feature":
        out["card"] = card_key(int(node["layer"]), int(node["node_id"].split("_")[1]))
    if kind == "logit":
        out["prob"] = _number(node.get("token_prob")) or 0.0
    return out


def page_data(document: dict[str, Any], cards: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The JSON the page's script reads: prompt, depth, nodes, links as [source, target, weight] (node indices; as
    reprune.file_graph reads them: no link of weight zero, a link named twice with its last weight), cards."""
    nodes = document["nodes"]
    where = {node["node_id"]: i for i, node in enumerate(nodes)}
    weights = {(where[link["source"]], where[link["target"]]): float(link["weight"]) for link in document["links"]
               if link["source"] in where and link["target"] in where}  # a link named twice: its last weight
    links = [[source, target, weight] for (source, target), weight in weights.items() if weight != 0]
    metadata = document["metadata"]
    return {"prompt": list(metadata.get("prompt_tokens", [])), "layers": _depth(nodes),
            "scan_is_node": "@" in str(metadata.get("scan", "")),
            "nodes": [_compact(node) for node in nodes], "links": links, "cards": cards}


def recorded_scores(store: StoreReader, node: Node, info: ArtifactInfo) -> dict[str, float]:
    """The scores compute_attribution_graph recorded on the node beside this version of the graph file (values
    `analysis/NAME/replacement_score`, `.../completeness_score`): each key's first value written at or after the
    version was saved; {} when none was."""
    keys = {f"analysis/{info.name}/{score}": score for score in SCORES}
    with store.read() as connection:
        rows = connection.execute(
            select(records.c.key, records.c.kind, records.c.num, records.c.txt)
            .join(node_rows, node_rows.c.id == records.c.node_id)
            .where(node_rows.c.name == node.name, node_rows.c.nonce == node.nonce, node_rows.c.seq == node.seq,
                   records.c.key.in_(keys), records.c.written >= info.created)
            .order_by(records.c.id)).all()
    found: dict[str, float] = {}
    for row in rows:
        value = _number(decode(row.kind, row.num, row.txt))
        if value is not None:
            found.setdefault(keys[row.key], value)
    return found


def _number(value: Any) -> float | None:
    """A finite number as a float, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _file_scores(metadata: dict[str, Any]) -> dict[str, float]:
    """Scores a graph file carries in its metadata (`replacement_score`, `completeness_score`), if any."""
    return {key: float(metadata[key]) for key in SCORES if _number(metadata.get(key)) is not None}


def load_graph(store: StoreReader, node: Node, name: str, version: int | None = None) -> GraphView:
    """The graph artifact `name` on `node` checked and made ready to draw; `Missing` saying why it cannot be."""
    info = artifact_info(store, node, name, version)
    where = f"artifact {info.name!r} on {node.address}"
    if info.size > MAX_GRAPH_BYTES:
        raise Missing(f"{where} is too large to draw ({info.size} bytes; the graph page reads at most "
                      f"{MAX_GRAPH_BYTES}): download it")
    document = parse_graph(artifact_content(store, info))
    if document is None:
        raise Missing(f"{where} is not an attribution graph file")
    try:
        check_graph(document)
    except GraphError as error:
        raise Missing(f"{where} is not a graph this page can draw: {error}") from None
    metadata = document["metadata"]
    features = {(int(n["layer"]), int(n["node_id"].split("_")[1])) for n in document["nodes"]
                if _kind(n) == "feature"}
    cards = dashboard_cards(store, str(metadata.get("scan", "")), features)
    return GraphView(node, info, list(metadata.get("prompt_tokens", [])), page_data(document, cards),
                     _file_scores(metadata) or recorded_scores(store, node, info),
                     _number(metadata.get("node_threshold")), str(metadata.get("scan", "")))


def load_address(store: StoreReader, text: str, version: int | None = None) -> GraphView:
    """A graph named `NODE/NAME` (the `with=` of the side-by-side view)."""
    address, _, name = text.partition("/")
    if not name:
        raise Missing(f"no graph {text!r}: expected NODE/NAME, e.g. grokking.train@7f3a2c:20/compute_attribution_graph")
    return load_graph(store, parse_node(address), name, version)
