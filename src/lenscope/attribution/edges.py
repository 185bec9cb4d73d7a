"""The edge program: a batch of attribution rows as one vmap of VJPs through the frozen replacement model.

A row is one target node (a feature's encoder direction at its MLP input, or a logit's demeaned unembedding
direction at the final residual); its entries are the direct linear effects of every source node (active
features, error nodes, token embeddings). The program returns the error and token entries and, for the features,
each row's gradient at every MLP-output site: the active features' products with it are taken on the host
(feature_columns.py), so no shape of the program depends on how many features a prompt has. One compiled program per
batch shape, padded length and layer group.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .protocols import Readout, ReplacementModel

Array = jax.Array


class Sources(NamedTuple):
    """The vectors of the source nodes whose number is fixed by the positions: errors and token embeddings (the
    features' scaled decoder rows stay on the host, feature_columns.py)."""

    errors: Array  # [n_layers, n_pos, d_model]
    tokens: Array  # [n_pos, d_model]


class Targets(NamedTuple):
    """A batch of target nodes: layer (n_layers means the final residual), position, direction."""

    layer: Array  # [B] int32
    pos: Array  # [B] int32
    vector: Array  # [B, d_model]


def cotangents(targets: Targets, n_layers: int, n_pos: int, top: int | None) -> Readout | Array:
    """The batch of readout cotangents [B, ...] that select each target's direction at its site: of the whole
    Readout, or (`top` given) of the first `top` layers' MLP inputs only."""
    n_sites = n_layers + 1 if top is None else top
    site = (jax.nn.one_hot(targets.layer, n_sites, dtype=targets.vector.dtype)[:, :, None, None]
            * jax.nn.one_hot(targets.pos, n_pos, dtype=targets.vector.dtype)[:, None, :, None]
            * targets.vector[:, None, None, :])
    return site if top is not None else Readout(site[:, :n_layers], site[:, n_layers])


def attribution_rows(model: ReplacementModel, params: Any, tokens: Array, frozen: Any, mlp_out: Array,
                     sources: Sources, targets: Targets, top: int | None = None) -> tuple[Array, Array]:
    """(site gradients [B, used, d_model], rows [B, n_layers * n_pos + n_pos]): each target's gradient at every
    MLP-output site (layer * n_pos + position) that can reach it, and its direct effect from each error and token
    node. A feature's entry is its site's gradient dotted with its scaled decoder row (feature_columns.py).

    With `top` (static), every target is a feature below layer `top` and the program reads only the first `top`
    layers' MLP inputs: the backward pass starts at layer `top - 1`, and only sites below it are returned (`used`).
    """
    n_layers, n_pos, d = mlp_out.shape

    def readout(embed_delta: Array, mlp_delta: Array) -> Readout | Array:
        out = model.frozen(params, tokens, frozen, mlp_out, embed_delta, mlp_delta, top)
        return out if top is None else out.mlp_in

    _, pullback = jax.vjp(readout, jnp.zeros((n_pos, d), mlp_out.dtype), jnp.zeros_like(mlp_out))
    grad_embed, grad_mlp = jax.vmap(pullback)(cotangents(targets, n_layers, n_pos, top))
    batch, n_sites = grad_mlp.shape[0], n_layers * n_pos
    used = n_sites if top is None else (top - 1) * n_pos  # a source at layer top - 1 or above reaches no target
    # products and sums, not einsums: XLA's CPU backend lowers these as one small dot per (layer, position),
    # which took longer than the whole backward pass
    errors = (grad_mlp * sources.errors).sum(-1).reshape(batch, -1)
    tokens_ = (grad_embed * sources.tokens).sum(-1)
    return grad_mlp.reshape(batch, n_sites, d)[:, :used], jnp.concatenate([errors, tokens_], axis=1)
