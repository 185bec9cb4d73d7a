"""Optional weight processing as in TransformerLens, each leaving the logits unchanged (up to a softmax shift).

fold_ln: each norm's scale (and LayerNorm bias) moves into the linear layers that read it, the norm keeps only
its normalization. center_writing_weights: every write into the residual stream loses its mean over d_model
(LayerNorm models, whose next norm removes that mean anyway). center_unembed: the unembedding loses its mean
over the vocabulary (a shift softmax ignores). fold_value_biases: value biases move into the output bias
(attention rows sum to 1). Tied embeddings are untied first where a change would otherwise touch both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax.numpy as jnp

from ...errors import UsageError
from ..equinox.layers import Dense
from .decoder import Decoder
from .layers import Norm

__all__ = ["TRANSFORMERLENS_DEFAULT", "applicable", "process"]

# TransformerLens' from_pretrained processing (from_pretrained_no_processing: none of it)
TRANSFORMERLENS_DEFAULT = {"fold_ln": True, "center_writing_weights": True, "center_unembed": True,
                           "fold_value_biases": True}


def _set(tree: Any, where: Callable[[Any], Any], value: Any) -> Any:
    return eqx.tree_at(where, tree, value, is_leaf=lambda x: x is None)


def _fold_norm(norm: Norm, readers: list[Any]) -> tuple[Norm, list[Any]]:
    """The norm reduced to its normalization, and each reader (Dense or Unembed, kernel [d_model, ...]) absorbing
    its scale and bias; after a LayerNorm, each reader's kernel centred over d_model (TransformerLens'
    fold_layer_norm(center_weights=True): the same outputs, since the normalized input has zero mean)."""
    scale = norm.scale + 1.0 if norm.offset else norm.scale
    folded = []
    for reader in readers:
        if reader is None:
            folded.append(None)
            continue
        kernel = reader.kernel
        shaped = scale.reshape(scale.shape + (1,) * (kernel.ndim - 1)).astype(kernel.dtype)
        bias = jnp.zeros(kernel.shape[1:], kernel.dtype) if reader.bias is None else reader.bias
        if norm.bias is not None:
            bias = bias + jnp.tensordot(norm.bias.astype(kernel.dtype), kernel, axes=(0, 0))
        kernel = kernel * shaped
        if norm.kind == "layernorm":  # its input is centred: the kernel's mean over d_model reads nothing (as TL)
            kernel = kernel - kernel.mean(axis=0, keepdims=True)
        reader = _set(reader, lambda r: r.kernel, kernel)
        folded.append(_set(reader, lambda r: r.bias, bias))
    identity = jnp.zeros_like(norm.scale) if norm.offset else jnp.ones_like(norm.scale)
    norm = _set(norm, lambda n: n.scale, identity)
    if norm.bias is not None:
        norm = _set(norm, lambda n: n.bias, jnp.zeros_like(norm.bias))
    return norm, folded


def untie(model: Decoder) -> Decoder:
    """The unembedding as its own kernel (the embedding's transpose) when the checkpoint ties them."""
    if model.unembed.kernel is not None:
        return model
    return _set(model, lambda m: m.unembed.kernel, model.embed.embedding.T)


def fold_ln(model: Decoder) -> Decoder:
    """Every pre-norm's scale and bias folded into the projections that read it (post norms are left alone)."""
    blocks = []
    for block in model.blocks:
        attn = block.attn
        ln1, (q, k, v) = _fold_norm(block.ln1, [attn.query, attn.key, attn.value])
        attn = eqx.tree_at(lambda a: (a.query, a.key, a.value), attn, (q, k, v))
        ln2, (fc_in, gate) = _fold_norm(block.ln2, [block.mlp.fc_in, block.mlp.gate])
        mlp = _set(_set(block.mlp, lambda m: m.fc_in, fc_in), lambda m: m.gate, gate)
        blocks.append(eqx.tree_at(lambda b: (b.ln1, b.attn, b.ln2, b.mlp), block, (ln1, attn, ln2, mlp)))
    model = eqx.tree_at(lambda m: m.blocks, model, blocks)
    if model.ln_final is not None:
        model = untie(model)
        ln_final, (unembed,) = _fold_norm(model.ln_final, [model.unembed])
        model = eqx.tree_at(lambda m: (m.ln_final, m.unembed), model, (ln_final, unembed))
    return model


def _centered(x: jnp.ndarray | None) -> jnp.ndarray | None:
    return None if x is None else x - x.mean(-1, keepdims=True)


def _center_dense(dense: Dense) -> Dense:
    dense = _set(dense, lambda d: d.kernel, _centered(dense.kernel))
    return dense if dense.bias is None else _set(dense, lambda d: d.bias, _centered(dense.bias))


def center_writing_weights(model: Decoder) -> Decoder:
    """Embeddings, attention outputs and MLP outputs with zero mean over d_model (LayerNorm models only)."""
    if model.config.norm != "layernorm" or model.config.post_norms:
        raise UsageError(f"center_writing_weights keeps the logits only when a LayerNorm reads every write; the "
                         f"{model.config.family} model uses {model.config.norm}")
    model = untie(model)
    model = _set(model, lambda m: m.embed.embedding, _centered(model.embed.embedding))
    if model.pos_embed is not None:
        model = _set(model, lambda m: m.pos_embed.embedding, _centered(model.pos_embed.embedding))
    blocks = [eqx.tree_at(lambda b: (b.attn.out, b.mlp.fc_out), block,
                          (_center_dense(block.attn.out), _center_dense(block.mlp.fc_out))) for block in model.blocks]
    return eqx.tree_at(lambda m: m.blocks, model, blocks)


def center_unembed(model: Decoder) -> Decoder:
    """The unembedding (and its bias) with zero mean over the vocabulary: logits shift by a constant per position."""
    model = untie(model)
    model = _set(model, lambda m: m.unembed.kernel, _centered(model.unembed.kernel))
    return model if model.unembed.bias is None else _set(model, lambda m: m.unembed.bias, _centered(model.unembed.bias))


def fold_value_biases(model: Decoder) -> Decoder:
    """Value biases moved into each attention's output bias (exact: every attention row sums to 1)."""
    blocks = []
    for block in model.blocks:
        attn = block.attn
        if attn.value.bias is None:
            blocks.append(block)
            continue
        heads = attn.out.kernel.shape[0]
        values = jnp.repeat(attn.value.bias, heads // attn.value.bias.shape[0], axis=0)
        moved = jnp.einsum("hk,hkd->d", values, attn.out.kernel)
        out_bias = moved if attn.out.bias is None else attn.out.bias + moved
        attn = _set(_set(attn, lambda a: a.out.bias, out_bias), lambda a: a.value.bias, jnp.zeros_like(attn.value.bias))
        blocks.append(eqx.tree_at(lambda b: b.attn, block, attn))
    return eqx.tree_at(lambda m: m.blocks, model, blocks)


STEPS = (("fold_ln", fold_ln), ("center_writing_weights", center_writing_weights),
         ("center_unembed", center_unembed), ("fold_value_biases", fold_value_biases))


def applicable(config: Any, requested: dict[str, bool]) -> dict[str, bool]:
    """The steps of `requested` that keep this model's logits, as TransformerLens decides: centring writes only
    where a LayerNorm reads every one (not RMSNorm); folding norms only where the model has them."""
    steps = dict(requested)
    if config.norm != "layernorm":
        steps["center_writing_weights"] = False
    if config.norm is None:
        steps["fold_ln"] = False
    return steps


def process(model: Decoder, *, fold_ln: bool = False, center_writing_weights: bool = False,
            center_unembed: bool = False, fold_value_biases: bool = False) -> Decoder:
    """The model with the chosen processing applied, in TransformerLens's order; all off by default."""
    chosen = {"fold_ln": fold_ln, "center_writing_weights": center_writing_weights,
              "center_unembed": center_unembed, "fold_value_biases": fold_value_biases}
    for name, step in STEPS:
        if chosen[name]:
            model = step(model)
    return model
