"""Influence, pruning and scores of an attribution graph (circuit-tracer's definitions, on NumPy arrays).

The adjacency is [targets, sources]; nodes are ordered features, errors (layer-major), tokens, logits.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import UsageError


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """|A| with each row scaled to sum to one (rows of zeros stay zero)."""
    magnitude = np.abs(matrix)
    return magnitude / np.maximum(magnitude.sum(axis=1, keepdims=True), 1e-10)


def total_influence(normalized: np.ndarray, weights: np.ndarray, max_iter: int = 1000) -> np.ndarray:
    """weights @ (A + A^2 + ...), the influence of every node on the weighted targets, by repeated products."""
    current = weights @ normalized
    influence = current.copy()
    for _ in range(max_iter):
        if not current.any():
            return influence
        current = current @ normalized
        influence += current
    raise UsageError(f"influence did not converge in {max_iter} steps: the graph has a cycle (is it acyclic?)")


def partial_influence(rows: np.ndarray, row_nodes: np.ndarray, logit_probs: np.ndarray,
                      max_iter: int = 128) -> np.ndarray:
    """Influence on the logits of every source column, from the rows computed so far (`row_nodes` names them).

    Used to pick the next features to expand: a node with no row yet passes influence to nobody.
    """
    normalized = normalize_rows(rows)
    influence = np.zeros(rows.shape[1])
    weights = np.zeros(rows.shape[1])
    weights[-len(logit_probs):] = logit_probs
    for _ in range(max_iter):
        weights = weights[row_nodes] @ normalized
        if not weights.any():
            return influence
        influence += weights
    raise UsageError(f"partial influence did not converge in {max_iter} steps")


def logit_weights(n_nodes: int, probs: np.ndarray) -> np.ndarray:
    """A node vector holding the logit probabilities on the logit nodes (the last ones), zero elsewhere."""
    weights = np.zeros(n_nodes)
    weights[n_nodes - len(probs):] = probs
    return weights


def threshold_for(scores: np.ndarray, fraction: float) -> float:
    """The score above which the largest scores add up to `fraction` of the total."""
    ordered = np.sort(scores.ravel())[::-1]
    cumulative = np.cumsum(ordered) / max(float(ordered.sum()), 1e-30)
    index = min(int(np.searchsorted(cumulative, fraction)), len(ordered) - 1)
    return float(ordered[index])


class Pruned(NamedTuple):
    """Kept nodes and edges, and each node's cumulative influence rank (0..1, smaller is more influential)."""

    node_mask: np.ndarray
    edge_mask: np.ndarray
    cumulative: np.ndarray


def _check_fraction(name: str, value: float) -> float:
    if not 0.0 <= float(value) <= 1.0:
        raise UsageError(f"{name} must be a fraction in [0, 1], got {value!r}")
    return float(value)


def prune(adjacency: np.ndarray, probs: np.ndarray, n_features: int, n_tokens: int,
          node_threshold: float = 0.8, edge_threshold: float = 0.98) -> Pruned:
    """Keep the nodes carrying `node_threshold` of the influence on the logits, then the edges carrying
    `edge_threshold`; tokens and logits always stay; features and errors without a kept way out (features: or in)
    are dropped until nothing changes."""
    node_threshold = _check_fraction("node_threshold", node_threshold)
    edge_threshold = _check_fraction("edge_threshold", edge_threshold)
    n, n_logits = adjacency.shape[0], len(probs)
    weights = logit_weights(n, probs)
    influence = total_influence(normalize_rows(adjacency), weights)
    node_mask = influence >= threshold_for(influence, node_threshold)
    node_mask[n - n_logits - n_tokens:] = True
    kept = adjacency * node_mask[:, None] * node_mask[None, :]
    normalized = normalize_rows(kept)
    edge_scores = normalized * (total_influence(normalized, weights) + weights)[:, None]
    edge_mask = edge_scores >= threshold_for(edge_scores, edge_threshold)
    inner = n - n_logits - n_tokens  # features and errors

    def drop_dead_ends() -> None:
        node_mask[:inner] &= edge_mask[:, :inner].any(axis=0)  # a way out
        node_mask[:n_features] &= edge_mask[:n_features].any(axis=1)  # and, for a feature, a way in

    before = node_mask.copy()
    drop_dead_ends()
    while (node_mask != before).any():
        before = node_mask.copy()
        edge_mask &= node_mask[:, None] & node_mask[None, :]
        drop_dead_ends()
    order = np.argsort(-influence, kind="stable")
    cumulative = np.empty(n)
    cumulative[order] = np.cumsum(influence[order]) / max(float(influence.sum()), 1e-30)
    return Pruned(node_mask, edge_mask, cumulative)


def graph_scores(adjacency: np.ndarray, probs: np.ndarray, n_features: int, n_layers: int,
                 n_tokens: int) -> tuple[float, float]:
    """(replacement, completeness): the share of token-to-logit influence not through error nodes, and the
    influence-weighted share of every node's inputs that do not come from error nodes."""
    errors = slice(n_features, n_features + n_layers * n_tokens)
    tokens = slice(errors.stop, errors.stop + n_tokens)
    weights = logit_weights(adjacency.shape[0], probs)
    normalized = normalize_rows(adjacency)
    influence = total_influence(normalized, weights)
    from_tokens, from_errors = influence[tokens].sum(), influence[errors].sum()
    replacement = from_tokens / max(from_tokens + from_errors, 1e-30)
    non_error = 1.0 - normalized[:, errors].sum(axis=1)
    output = influence + weights
    completeness = (non_error * output).sum() / max(output.sum(), 1e-30)
    return float(replacement), float(completeness)
