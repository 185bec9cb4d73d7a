"""An attribution graph file (circuit-tracer's JSON schema) laid out for the graph page: tokens along the bottom,
logits at the top, each layer's features and error nodes in between, one column per prompt position.

Only numbers and strings come out of here; the template writes the SVG (so every label is HTML-escaped).
"""

from __future__ import annotations

import io
import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from lenscope.store import StoreReader
from lenscope.ui.graph_check import parse_graph
from lenscope.ui.nodes import Missing, artifact_content, artifact_info, parse_node

COLUMN, ROW, MARGIN, TOP = 150, 100, 70, 40
STEP, CROWD = 22, 24  # a cell's node spacing, and how many nodes a cell widens its column for
MAX_TABLE_BYTES = 64 << 20  # a dashboard table the graph page reads for its feature links


def is_graph(text: str) -> bool:
    """Whether a JSON artifact's text is an attribution graph file."""
    return parse_graph(text.encode()) is not None


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
    short_y: float = 0.0  # where: above the node, or below it where labels would collide


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


def dashboard_table(layer: int) -> str:
    """The dashboard table of a dictionary job's layer: `features.parquet` for layer 0, `features_L.parquet`."""
    return "features.parquet" if layer == 0 else f"features_{layer}.parquet"


def feature_href(scan: str, layer: int, feature: int) -> str:
    """The dashboard page of a feature when the graph's `scan` is the transcoders' node; '' otherwise."""
    if "@" not in scan:
        return ""
    return f"/feature/{quote(scan, safe='')}/{dashboard_table(layer)}/{feature}"


def dashboards(store: StoreReader, scan: str, layers: Iterable[int]) -> dict[int, set[int]]:
    """The latents with a dashboard page, per layer, on the transcoders' node `scan` (a dictionary job's node keeps
    dashboards of its most active latents only); {} when `scan` is no node of this store."""
    import pyarrow.parquet as pq  # lazy: only graph pages with a transcoder node read tables

    if "@" not in scan:
        return {}
    try:
        node = parse_node(scan)
    except Missing:
        return {}
    found = {}
    for layer in sorted(set(layers)):
        try:
            info = artifact_info(store, node, dashboard_table(layer))
            if info.size > MAX_TABLE_BYTES:
                continue
            table = pq.read_table(io.BytesIO(artifact_content(store, info)), columns=["latent"])
        except Exception:  # no such node or table, or a damaged one: that layer's features get no links
            continue
        found[layer] = {int(v) for v in table.column("latent").to_pylist()}
    return found


def _in_order(members: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A cell's nodes left to right: features by influence rank (the most influential first), its error node last."""
    return sorted(members, key=lambda n: (_kind(n) == "error", n.get("influence") or 0.0))


def layout(document: dict[str, Any], linked: Mapping[int, Collection[int]] | None = None) -> Layout:
    """Positions of every node and link of a checked graph (see graph_check.check_graph). A feature node links to its
    dashboard page (see feature_href): every one when `linked` is None, else those in `linked[layer]` (see
    dashboards)."""
    nodes, links = document["nodes"], document["links"]
    prompt = list(document["metadata"].get("prompt_tokens", []))
    scan = str(document["metadata"].get("scan", ""))
    logit_layers = [int(n["layer"]) for n in nodes if n["feature_type"] == "logit"]
    n_layers = max(logit_layers) - 1 if logit_layers else 1 + max((int(n["layer"]) for n in nodes
                                                                   if _kind(n) != "token"), default=0)
    n_pos = max([len(prompt)] + [int(n["ctx_idx"]) + 1 for n in nodes])
    cells: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for node in nodes:
        cells[(_row_of(node, n_layers), int(node["ctx_idx"]))].append(node)
    widest = max((len(v) for v in cells.values()), default=1)
    column = max(COLUMN, STEP * min(widest, CROWD) + 40)
    width, height = 2 * MARGIN + column * n_pos, TOP + ROW * (n_layers + 1) + 60
    out = Layout(width, height, prompt)
    for row in range(n_layers + 2):
        label = "tokens" if row == 0 else "logits" if row == n_layers + 1 else f"layer {row - 1}"
        out.rows.append((height - 40 - row * ROW, label))
    out.columns = [(MARGIN + column * (pos + 0.5), prompt[pos] if pos < len(prompt) else str(pos))
                   for pos in range(n_pos)]
    where: dict[str, tuple[float, float]] = {}
    for (row, pos), members in sorted(cells.items()):
        step = min(float(STEP), (column - 40) / max(len(members), 1))
        start = MARGIN + column * (pos + 0.5) - step * (len(members) - 1) / 2
        for i, node in enumerate(_in_order(members)):
            x, y = start + i * step, height - 40 - row * ROW + (8 if row == 0 else 0)
            where[node["node_id"]] = (x, y)
            out.dots.append(_dot(node, x, y, scan, linked, below=step < STEP and i % 2 == 1))
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


def _dot(node: dict[str, Any], x: float, y: float, scan: str, linked: Mapping[int, Collection[int]] | None,
         below: bool) -> Dot:
    """One node drawn at (x, y); `below`: its short label goes under it (staggered where a cell is crowded)."""
    kind = _kind(node)
    label = node.get("clerp") or node["node_id"]
    extra = f" activation {node['activation']:.3g}" if node.get("activation") is not None else ""
    href = ""
    if kind == "feature":
        layer, latent = int(node["layer"]), int(node["node_id"].split("_")[1])
        if linked is None or latent in linked.get(layer, ()):
            href = feature_href(scan, layer, latent)
        elif "@" in scan:
            extra += " · no dashboard page (its dictionary job keeps those of its most active latents)"
    short = {"logit": label.split('"')[1] if label.count('"') >= 2 else label,
             "feature": node["node_id"].split("_")[1]}.get(kind, "")
    return Dot(node["node_id"], x, y, kind, label, f"{node['feature_type']} {label}{extra}", href, short,
               y + 20 if below else y - 12)
