"""An attribution graph file (circuit-tracer's JSON schema) laid out for the graph page: tokens along the bottom,
logits at the top, each layer's features and error nodes in between, one column per prompt position.

Only numbers and strings come out of here; the template writes the SVG (so every label is HTML-escaped).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

COLUMN, ROW, MARGIN, TOP = 150, 90, 70, 40
KEYS = {"metadata", "qParams", "nodes", "links"}


def is_graph(text: str) -> bool:
    """Whether a JSON artifact's text is an attribution graph file."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to parse (then not a graph file either)
        return False
    return isinstance(document, dict) and set(document) >= KEYS


@dataclass
class Dot:
    """One drawn node."""

    node_id: str
    x: float
    y: float
    kind: str  # feature, error, token, logit
    label: str
    title: str
    href: str = ""
    short: str = ""  # drawn beside the node: the output token of a logit, the index of a feature


@dataclass
class Edge:
    """One drawn link: from source to target, width by |weight|, colour by sign."""

    x1: float
    y1: float
    x2: float
    y2: float
    width: float
    positive: bool
    title: str


@dataclass
class Layout:
    """The drawn graph: its size, rows' labels, columns' tokens, nodes and links."""

    width: int
    height: int
    prompt: list[str]
    rows: list[tuple[float, str]] = field(default_factory=list)
    columns: list[tuple[float, str]] = field(default_factory=list)
    dots: list[Dot] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)


def _row_of(node: dict[str, Any], n_layers: int) -> int:
    """0 for tokens, 1 + layer for features and errors, n_layers + 1 for logits."""
    if node["feature_type"] == "embedding":
        return 0
    if node["feature_type"] == "logit":
        return n_layers + 1
    return int(node["layer"]) + 1


def _kind(node: dict[str, Any]) -> str:
    return {"embedding": "token", "logit": "logit", "mlp reconstruction error": "error"}.get(node["feature_type"],
                                                                                            "feature")


def feature_href(scan: str, layer: int, feature: int) -> str:
    """The dashboard page of a feature when the graph's `scan` is the transcoders' node (the feature page of that
    layer's dashboard table, `features.parquet` or `features_L.parquet`); '' otherwise."""
    if "@" not in scan:
        return ""
    table = "features.parquet" if layer == 0 else f"features_{layer}.parquet"
    return f"/feature/{quote(scan, safe='')}/{table}/{feature}"


def layout(document: dict[str, Any]) -> Layout:
    """Positions of every node and link; feature nodes link to their dashboard (see feature_href)."""
    nodes, links = document["nodes"], document["links"]
    prompt = list(document["metadata"].get("prompt_tokens", []))
    logit_layers = [int(n["layer"]) for n in nodes if n["feature_type"] == "logit"]
    n_layers = max(logit_layers) - 1 if logit_layers else 1 + max((int(n["layer"]) for n in nodes
                                                                   if n["layer"] != "E"), default=0)
    n_pos = max([len(prompt)] + [int(n["ctx_idx"]) + 1 for n in nodes])
    cells: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for node in nodes:
        cells[(_row_of(node, n_layers), int(node["ctx_idx"]))].append(node)
    widest = max((len(v) for v in cells.values()), default=1)
    column = max(COLUMN, 22 * min(widest, 12))
    width, height = 2 * MARGIN + column * n_pos, TOP + ROW * (n_layers + 1) + 60
    out = Layout(width, height, prompt)
    for row in range(n_layers + 2):
        label = "tokens" if row == 0 else "logits" if row == n_layers + 1 else f"layer {row - 1}"
        out.rows.append((height - 40 - row * ROW, label))
    out.columns = [(MARGIN + column * (pos + 0.5), prompt[pos] if pos < len(prompt) else str(pos))
                   for pos in range(n_pos)]
    where: dict[str, tuple[float, float]] = {}
    for (row, pos), members in sorted(cells.items()):
        members.sort(key=lambda n: -(n.get("influence") is None) or n.get("influence") or 0.0)
        step = min(22.0, (column - 20) / max(len(members), 1))
        start = MARGIN + column * (pos + 0.5) - step * (len(members) - 1) / 2
        for i, node in enumerate(members):
            x, y = start + i * step, height - 40 - row * ROW + (8 if row == 0 else 0)
            where[node["node_id"]] = (x, y)
            kind = _kind(node)
            href = feature_href(str(document["metadata"].get("scan", "")), int(node["layer"]),
                                int(node["node_id"].split("_")[1])) if kind == "feature" else ""
            label = node["clerp"] or node["node_id"]
            extra = f" activation {node['activation']:.3g}" if node.get("activation") is not None else ""
            short = {"logit": label.split('"')[1] if label.count('"') >= 2 else label,
                     "feature": node["node_id"].split("_")[1]}.get(kind, "")
            out.dots.append(Dot(node["node_id"], x, y, kind, label, f"{node['feature_type']} {label}{extra}", href,
                                short))
    scale = max((abs(link["weight"]) for link in links), default=1.0) or 1.0
    for link in links:
        if link["source"] not in where or link["target"] not in where:
            continue
        (x1, y1), (x2, y2) = where[link["source"]], where[link["target"]]
        width = 0.4 + 4.0 * math.sqrt(abs(link["weight"]) / scale)
        out.edges.append(Edge(x1, y1, x2, y2, width, link["weight"] >= 0,
                              f"{link['source']} → {link['target']}: {link['weight']:.4g}"))
    out.edges.sort(key=lambda e: e.width)
    return out
