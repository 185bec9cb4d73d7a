"""Two attribution graph files compared node by node and edge by edge (graphs of one prompt at two checkpoints).

Nodes match by what they are: a token or a logit by its position and token, an error node by its layer and position,
a feature by its layer, position and latent, graph A's latent carried into graph B's transcoder by a
`Correspondence` (decoder matching, `dictionaries.match_decoders`; none when both graphs used one dictionary). An edge
matches when both its ends do. The table has one row per node and edge of either graph (see `compare_graphs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..dictionaries import match_decoders
from ..errors import UsageError
from .influence import logit_weights, normalize_rows, total_influence
from .reprune import file_graph
from .schema import node_index

KINDS = {"cross layer transcoder": "feature", "mlp reconstruction error": "error", "embedding": "token",
         "logit": "logit"}
STATUSES = ("appears", "vanishes", "changed", "kept")
COLUMNS = ("item", "kind", "layer", "position", "node_a", "node_b", "latent_a", "latent_b", "similarity", "in_a",
           "in_b", "status", "value_a", "value_b", "change", "activation_a", "activation_b")


@dataclass(frozen=True)
class Correspondence:
    """Graph A's transcoder latents carried into graph B's, per layer: `latents[layer][i]` is B's latent for A's
    latent i (-1: none), `similarity[layer][i]` their decoder cosine (NaN: none)."""

    latents: Mapping[int, np.ndarray]
    similarity: Mapping[int, np.ndarray]
    _inverse: dict[int, dict[int, int]] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, latents: Mapping[int, Any], similarity: Mapping[int, Any] | None = None) -> Correspondence:
        """From {layer: B's latent for each of A's latents, -1 for none} (checked one-to-one), with the cosines."""
        mapped = {int(layer): np.asarray(values, np.int64).reshape(-1) for layer, values in latents.items()}
        for layer, values in mapped.items():
            used = values[values >= 0]
            if len(np.unique(used)) != len(used):
                twice = int(next(v for v in used if np.sum(used == v) > 1))
                firsts = np.flatnonzero(values == twice)[:2].tolist()
                raise UsageError(f"the correspondence of layer {layer} maps latents {firsts[0]} and {firsts[1]} of A "
                                 f"to latent {twice} of B: it must be one-to-one (-1 for no match)")
        cosines = {layer: np.full(len(values), np.nan) for layer, values in mapped.items()}
        for layer, values in (similarity or {}).items():
            cosines[int(layer)] = np.asarray(values, np.float64).reshape(-1)
        return cls(mapped, cosines)

    def forward(self, layer: int, latent: int) -> int:
        """B's latent for A's `latent` at `layer` (-1: unmatched)."""
        if layer not in self.latents:
            raise UsageError(f"the latent correspondence has no layer {layer} (it has layers "
                             f"{sorted(self.latents)}): give one mapping per transcoder layer of graph A")
        mapping = self.latents[layer]
        if not 0 <= latent < len(mapping):
            raise UsageError(f"graph A has latent {latent} at layer {layer}, outside the correspondence's "
                             f"{len(mapping)} latents of that layer: was it made from graph A's transcoders?")
        return int(mapping[latent])

    def backward(self, layer: int, latent: int) -> int:
        """A's latent that maps to B's `latent` at `layer` (-1: none)."""
        if layer not in self._inverse:
            mapping = np.asarray(self.latents.get(layer, np.zeros(0, np.int64)))
            self._inverse[layer] = {int(b): a for a, b in enumerate(mapping.tolist()) if b >= 0}
        return self._inverse[layer].get(int(latent), -1)

    def cosine(self, layer: int, latent_a: int) -> float:
        """The decoder cosine of A's `latent_a` and its match (NaN: unmatched)."""
        return float(self.similarity[layer][latent_a]) if latent_a >= 0 and layer in self.similarity else np.nan


def latent_correspondence(a: Sequence[Any], b: Sequence[Any], min_similarity: float = 0.7) -> Correspondence:
    """Each layer's latents of transcoders `a` matched to those of `b` by decoder cosine (an optimal one-to-one
    assignment, `match_decoders`); a pair less similar than `min_similarity` counts as unmatched."""
    if not -1.0 <= float(min_similarity) <= 1.0:
        raise UsageError(f"min_similarity is a cosine similarity, from -1 to 1; got {min_similarity}")
    if len(a) != len(b):
        raise UsageError(f"graph A has {len(a)} transcoders and graph B {len(b)}: a correspondence matches one "
                         "transcoder per layer, so both graphs need the same layers")
    latents, cosines = {}, {}
    for layer, (first, second) in enumerate(zip(a, b)):
        indices, similarity = match_decoders(first, second)
        weak = ~(similarity >= float(min_similarity))  # NaN (unmatched) counts as weak
        latents[layer] = np.where(weak, -1, indices)
        cosines[layer] = np.where(weak, np.nan, similarity)
    return Correspondence.of(latents, cosines)


@dataclass
class _Node:
    """One node of one graph: the file's record and its value (influence share, or a logit's probability)."""

    record: dict[str, Any]
    value: float


def _values(document: dict[str, Any]) -> dict[str, float]:
    """Each node's value by id: its share of the influence on the logits over the file's own links (what the graph
    page's card calls its share), a logit's probability."""
    graph = file_graph(document)
    weights = logit_weights(len(graph.nodes), graph.probs)
    influence = total_influence(normalize_rows(graph.adjacency), weights)
    share = influence / max(float(influence.sum()), 1e-30)
    return {node["node_id"]: float(node.get("token_prob") or 0.0) if node["feature_type"] == "logit"
            else float(share[i]) for i, node in enumerate(graph.nodes)}


def _kind(node: dict[str, Any]) -> str:
    kind = KINDS.get(node.get("feature_type"))
    if kind is None:
        raise UsageError(f"node {node.get('node_id')!r} has feature_type {node.get('feature_type')!r}; a graph file's "
                         f"nodes are one of {', '.join(map(repr, KINDS))}")
    return kind


def _key(node: dict[str, Any], carry: Correspondence | None) -> tuple:
    """What a node matches by; `carry` maps graph A's latents into B's (None: B's own nodes, or one dictionary)."""
    kind, pos = _kind(node), int(node["ctx_idx"])
    if kind in ("token", "logit"):
        return kind, pos, node_index(node)
    layer = int(node["layer"])
    if kind == "error":
        return kind, layer, pos
    latent = node_index(node)
    if carry is None:
        return kind, layer, pos, latent
    mapped = carry.forward(layer, latent)
    return (kind, layer, pos, mapped) if mapped >= 0 else ("unmatched", layer, pos, latent)


def _nodes(document: dict[str, Any], carry: Correspondence | None, which: str) -> dict[tuple, _Node]:
    values, out = _values(document), {}
    for node in document["nodes"]:
        key = _key(node, carry)
        if key in out:
            raise UsageError(f"graph {which} has two nodes that match as one ({out[key].record['node_id']!r} and "
                             f"{node['node_id']!r}): is its latent correspondence one-to-one?")
        out[key] = _Node(node, values[node["node_id"]])
    return out


def _links(document: dict[str, Any], nodes: dict[tuple, _Node]) -> dict[tuple, tuple[str, float]]:
    """The file's links of nonzero weight between its nodes, by (source key, target key): (id, weight); a link named
    twice counts with its last weight (as reprune.file_graph reads it)."""
    keys = {node.record["node_id"]: key for key, node in nodes.items()}
    out = {}
    for link in document["links"]:
        source, target = keys.get(link["source"]), keys.get(link["target"])
        if source is not None and target is not None:
            out[(source, target)] = (f"{link['source']} -> {link['target']}", float(link["weight"]))
    return {key: value for key, value in out.items() if value[1] != 0}


def _status(in_a: bool, in_b: bool, value_a: float, value_b: float) -> str:
    """appears (only in B), vanishes (only in A), changed (at least doubled, halved or of the other sign), kept."""
    if not in_a:
        return "appears"
    if not in_b:
        return "vanishes"
    return "changed" if abs(value_b - value_a) >= 0.5 * max(abs(value_a), abs(value_b), 1e-30) else "kept"


def _number(value: Any) -> float:
    return np.nan if value is None else float(value)


def _node_row(a: _Node | None, b: _Node | None, carry: Correspondence | None) -> dict[str, Any]:
    some = (a or b).record
    kind = _kind(some)
    layer = -1 if kind == "token" else int(some["layer"])
    latent_a = node_index(a.record) if a and kind == "feature" else -1
    latent_b = node_index(b.record) if b and kind == "feature" else -1
    similarity = np.nan
    if kind == "feature":
        if carry is None:
            latent_a, latent_b, similarity = max(latent_a, latent_b), max(latent_a, latent_b), 1.0
        else:
            latent_b = carry.forward(layer, latent_a) if latent_b < 0 else latent_b
            latent_a = carry.backward(layer, latent_b) if latent_a < 0 else latent_a
            similarity = carry.cosine(layer, latent_a) if latent_b >= 0 else np.nan
    value_a, value_b = (np.nan if n is None else n.value for n in (a, b))
    return {"item": "node", "kind": kind, "layer": layer, "position": int(some["ctx_idx"]),
            "node_a": a.record["node_id"] if a else "", "node_b": b.record["node_id"] if b else "",
            "latent_a": latent_a, "latent_b": latent_b, "similarity": similarity,
            "activation_a": _number(a.record.get("activation")) if a and kind == "feature" else np.nan,
            "activation_b": _number(b.record.get("activation")) if b and kind == "feature" else np.nan,
            **_measured(a is not None, b is not None, value_a, value_b)}


def _measured(in_a: bool, in_b: bool, value_a: float, value_b: float) -> dict[str, Any]:
    change = (value_b if in_b else 0.0) - (value_a if in_a else 0.0)
    return {"in_a": in_a, "in_b": in_b, "value_a": value_a, "value_b": value_b, "change": change,
            "status": _status(in_a, in_b, 0.0 if not in_a else value_a, 0.0 if not in_b else value_b)}


def _edge_row(key: tuple, a: tuple[str, float] | None, b: tuple[str, float] | None,
              nodes: dict[tuple, _Node]) -> dict[str, Any]:
    source, target = (nodes[k].record for k in key)
    kind = f"{_kind(source)}->{_kind(target)}"
    layer = -1 if _kind(target) == "token" else int(target["layer"])
    value_a, value_b = (np.nan if w is None else w[1] for w in (a, b))
    return {"item": "edge", "kind": kind, "layer": layer, "position": int(target["ctx_idx"]),
            "node_a": a[0] if a else "", "node_b": b[0] if b else "", "latent_a": -1, "latent_b": -1,
            "similarity": np.nan, "activation_a": np.nan, "activation_b": np.nan,
            **_measured(a is not None, b is not None, value_a, value_b)}


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: -abs(row["change"]))  # stable: file order among equal changes


def compare_graphs(a: dict[str, Any], b: dict[str, Any],
                   correspondence: Correspondence | None = None) -> dict[str, list]:
    """The comparison of graph files `a` and `b` as table columns (COLUMNS), one row per node, then one per edge, of
    either graph, each part ordered by |change|, largest first.

    `correspondence` carries A's feature latents into B's (`latent_correspondence`); None when both graphs used one
    dictionary. A node's value is its share of the influence on the logits over its file's links (a logit's: its
    probability), an edge's its weight; `change` is B's minus A's, an absent one counting as 0; `status` is
    appears (only in B), vanishes (only in A), changed (at least doubled or halved, or of the other sign) or kept.
    """
    nodes_a, nodes_b = _nodes(a, correspondence, "A"), _nodes(b, None, "B")
    keys = list(nodes_a) + [key for key in nodes_b if key not in nodes_a]
    rows = _sorted([_node_row(nodes_a.get(k), nodes_b.get(k), correspondence) for k in keys])
    links_a, links_b = _links(a, nodes_a), _links(b, nodes_b)
    both = {**nodes_b, **nodes_a}
    edges = list(links_a) + [key for key in links_b if key not in links_a]
    rows += _sorted([_edge_row(k, links_a.get(k), links_b.get(k), both) for k in edges])
    return {name: [row[name] for row in rows] for name in COLUMNS}


def summary(table: Mapping[str, Sequence[Any]]) -> dict[str, dict[str, int]]:
    """How many nodes and edges appear, vanish, changed and were kept: {"nodes": {status: n}, "edges": {...}}."""
    out = {part: dict.fromkeys(STATUSES, 0) for part in ("nodes", "edges")}
    for item, status in zip(table["item"], table["status"]):
        out[f"{item}s"][status] += 1
    return out
