"""Check a graph edge by edge the way circuit-tracer's tests do: remove a source node in the frozen replacement model
(a real forward pass with that node's vector subtracted) and compare each target's change with the edge weight."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .graph import AttributionGraph, Attributor, Prepared


def source_deltas(prepared: Prepared, graph: AttributionGraph, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(embed deltas [B, width, d], MLP-output deltas [B, n_layers, width, d]) removing each source column (width:
    the prompt's padded length, as the frozen forward runs)."""
    n_layers, width, d = prepared.mlp_out.shape
    n_pos = prepared.n_pos
    embed = np.zeros((len(columns), width, d), np.float32)
    mlp = np.zeros((len(columns), n_layers, width, d), np.float32)
    decoders = prepared.decoder
    errors, tokens = np.asarray(prepared.sources.errors), np.asarray(prepared.sources.tokens)
    first_error, first_token = graph.n_features, graph.n_features + n_layers * n_pos
    for row, column in enumerate(columns):
        if column < first_error:
            index = graph.selected_features[column]
            layer, pos, _ = graph.active_features[index]
            mlp[row, layer, pos] = -decoders[index]
        elif column < first_token:
            layer, pos = divmod(int(column) - first_error, n_pos)
            mlp[row, layer, pos] = -errors[layer, pos]
        else:
            embed[row, column - first_token] = -tokens[column - first_token]
    return embed, mlp


def edge_errors(attributor: Attributor, params: Any, graph: AttributionGraph, columns: Any,
                skip_positions: int = 1) -> np.ndarray:
    """|measured - predicted| [targets, len(columns)]: removing source column c moves every target (the selected
    features' pre-activations, then the logit nodes' demeaned logits) by -adjacency[target, c]."""
    columns = np.asarray(columns, np.int64)
    prepared = attributor.prepare(params, graph.input_tokens, skip_positions)
    model, n_pos = attributor.model, graph.n_pos
    chosen = graph.selected_features
    layers, positions = jnp.asarray(graph.active_features[chosen, 0]), jnp.asarray(graph.active_features[chosen, 1])
    encoders, logit_vecs = jnp.asarray(prepared.encoders[chosen]), jnp.asarray(graph.logit_vectors)

    def values(embed_delta: jax.Array, mlp_delta: jax.Array) -> jax.Array:
        readout = model.frozen(params, prepared.tokens, prepared.frozen, prepared.mlp_out, embed_delta, mlp_delta)
        features = jnp.einsum("fd,fd->f", readout.mlp_in[layers, positions], encoders)
        return jnp.concatenate([features, logit_vecs @ readout.final[n_pos - 1]])

    embed, mlp = source_deltas(prepared, graph, columns)
    run = jax.jit(jax.vmap(values))
    base = run(jnp.zeros_like(embed[:1]), jnp.zeros_like(mlp[:1]))[0]
    moved = np.asarray(run(jnp.asarray(embed), jnp.asarray(mlp)) - base)
    n = graph.adjacency.shape[0]
    rows = np.concatenate([np.arange(graph.n_features), np.arange(n - len(graph.logit_targets), n)])
    return np.abs(moved.T + graph.adjacency[np.ix_(rows, columns)])
