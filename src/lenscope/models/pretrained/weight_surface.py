"""TransformerLens' weight and circuit names on a loaded model: W_U, W_E, W_pos, W_Q ... b_out stacked over layers,
`blocks[L].attn.W_Q` and `blocks[L].mlp.W_in` per block, OV and QK as FactoredMatrix, tokens_to_residual_directions.

Shapes are TransformerLens' (HookedTransformer's properties): W_Q, W_K, W_V [n_layers, n_heads, d_model, d_head],
W_O [n_layers, n_heads, d_head, d_model], W_in [n_layers, d_model, d_mlp]. Grouped key/value heads are repeated to
one per query head (head h reads key/value head h // (n_heads / n_kv_heads)), biases a checkpoint lacks are zeros,
and a gated MLP's W_in is its linear branch (W_gate the gate's). W_E includes an embedding scale (Gemma's
sqrt(d_model)), as TransformerLens folds it in. Each name is read from the model's arrays on access: views and
small JAX ops, nothing kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

from .cache_stacks import ModelView
from .factored import FactoredMatrix
from .notebook_html import model_html

if TYPE_CHECKING:
    from ..equinox.layers import Dense
    from .decoder import MLP, Attention, Decoder

Array = jax.Array

__all__ = ["AttentionWeights", "BlockWeights", "MlpWeights", "WeightSurface"]


def _bias(dense: Dense | None, shape: tuple[int, ...], dtype: Any) -> Array:
    """The layer's bias, or zeros of `shape` where it has none (as TransformerLens keeps them)."""
    return jnp.zeros(shape, dtype) if dense is None or dense.bias is None else dense.bias


def _per_query_head(x: Array, n_heads: int) -> Array:
    """Key/value heads on axis 0 repeated to one per query head (each kept for n_heads / n_kv_heads heads)."""
    return x if x.shape[0] == n_heads else jnp.repeat(x, n_heads // x.shape[0], axis=0)


@dataclass(frozen=True, eq=False)
class AttentionWeights:
    """One block's attention weights under TransformerLens' names (`model.blocks[L].attn.W_Q`)."""

    attn: Attention

    @property
    def n_heads(self) -> int:
        """The number of query heads."""
        return self.attn.query.kernel.shape[1]

    @property
    def W_Q(self) -> Array:
        """[n_heads, d_model, d_head]."""
        return jnp.transpose(self.attn.query.kernel, (1, 0, 2))

    @property
    def W_K(self) -> Array:
        """[n_heads, d_model, d_head], key/value heads repeated per query head."""
        return _per_query_head(jnp.transpose(self.attn.key.kernel, (1, 0, 2)), self.n_heads)

    @property
    def W_V(self) -> Array:
        """[n_heads, d_model, d_head], key/value heads repeated per query head."""
        return _per_query_head(jnp.transpose(self.attn.value.kernel, (1, 0, 2)), self.n_heads)

    @property
    def W_O(self) -> Array:
        """[n_heads, d_head, d_model]."""
        return self.attn.out.kernel

    @property
    def b_Q(self) -> Array:
        """[n_heads, d_head] (zeros without a bias)."""
        return _bias(self.attn.query, self.attn.query.kernel.shape[1:], self.attn.query.kernel.dtype)

    @property
    def b_K(self) -> Array:
        """[n_heads, d_head], repeated per query head (zeros without a bias)."""
        kernel = self.attn.key.kernel
        return _per_query_head(_bias(self.attn.key, kernel.shape[1:], kernel.dtype), self.n_heads)

    @property
    def b_V(self) -> Array:
        """[n_heads, d_head], repeated per query head (zeros without a bias)."""
        kernel = self.attn.value.kernel
        return _per_query_head(_bias(self.attn.value, kernel.shape[1:], kernel.dtype), self.n_heads)

    @property
    def b_O(self) -> Array:
        """[d_model] (zeros without a bias)."""
        kernel = self.attn.out.kernel
        return _bias(self.attn.out, kernel.shape[-1:], kernel.dtype)

    @property
    def OV(self) -> FactoredMatrix:
        """Each head's OV circuit W_V @ W_O, [n_heads, d_model, d_model] of rank d_head."""
        return FactoredMatrix(self.W_V, self.W_O)

    @property
    def QK(self) -> FactoredMatrix:
        """Each head's QK circuit W_Q @ W_Kᵀ, [n_heads, d_model, d_model] (rotary positions and scale aside)."""
        return FactoredMatrix(self.W_Q, jnp.swapaxes(self.W_K, -1, -2))


@dataclass(frozen=True, eq=False)
class MlpWeights:
    """One block's MLP weights under TransformerLens' names (`model.blocks[L].mlp.W_in`)."""

    mlp: MLP

    @property
    def W_in(self) -> Array:
        """[d_model, d_mlp]: the input (of a gated MLP, the linear branch)."""
        return self.mlp.fc_in.kernel

    @property
    def W_gate(self) -> Array | None:
        """[d_model, d_mlp]: a gated MLP's gate; None otherwise."""
        return None if self.mlp.gate is None else self.mlp.gate.kernel

    @property
    def W_out(self) -> Array:
        """[d_mlp, d_model]."""
        return self.mlp.fc_out.kernel

    @property
    def b_in(self) -> Array:
        """[d_mlp] (zeros without a bias)."""
        kernel = self.mlp.fc_in.kernel
        return _bias(self.mlp.fc_in, kernel.shape[-1:], kernel.dtype)

    @property
    def b_out(self) -> Array:
        """[d_model] (zeros without a bias)."""
        kernel = self.mlp.fc_out.kernel
        return _bias(self.mlp.fc_out, kernel.shape[-1:], kernel.dtype)


@dataclass(frozen=True, eq=False)
class BlockWeights:
    """One block as `model.blocks[L]`: its `attn` and `mlp` weights."""

    attn: AttentionWeights
    mlp: MlpWeights


def _stacked(surface: WeightSurface, part: str, name: str) -> Array:
    """One weight of every block stacked on a new leading axis (layers)."""
    return jnp.stack([getattr(getattr(block, part), name) for block in surface.blocks])


class WeightSurface:
    """The weight names of TransformerLens' HookedTransformer, on a class with `model` (a Decoder) and `tokenizer`."""

    model: Decoder

    @property
    def blocks(self) -> tuple[BlockWeights, ...]:
        """Each block's weights: `model.blocks[L].attn.W_Q`, `model.blocks[L].mlp.W_in`."""
        return tuple(BlockWeights(AttentionWeights(b.attn), MlpWeights(b.mlp)) for b in self.model.blocks)

    @property
    def W_E(self) -> Array:
        """The embedding [d_vocab, d_model] (times the embedding scale, where the family has one)."""
        table = self.model.embed.embedding
        scale = self.model.config.embed_scale
        return table if scale is None else table * jnp.asarray(scale, table.dtype)

    @property
    def W_pos(self) -> Array:
        """The learned position embedding [n_ctx, d_model] (models with learned positions only)."""
        if self.model.pos_embed is None:
            raise AttributeError(f"W_pos: this {self.model.config.family} model has rotary positions, no learned "
                                 "position table; W_pos exists for learned positions (gpt2)")
        return self.model.pos_embed.embedding

    @property
    def W_E_pos(self) -> Array:
        """W_E and W_pos concatenated [d_vocab + n_ctx, d_model]."""
        return jnp.concatenate([self.W_E, self.W_pos], axis=0)

    @property
    def W_U(self) -> Array:
        """The unembedding [d_model, d_vocab] (W_Eᵀ, unscaled, when tied)."""
        kernel = self.model.unembed.kernel
        return self.model.embed.embedding.T if kernel is None else kernel

    @property
    def b_U(self) -> Array:
        """The unembedding bias [d_vocab] (zeros: checkpoints have none; folding a LayerNorm makes one)."""
        bias = self.model.unembed.bias
        embedding = self.model.embed.embedding
        return jnp.zeros(embedding.shape[:1], embedding.dtype) if bias is None else bias

    W_Q = property(lambda self: _stacked(self, "attn", "W_Q"), doc="[n_layers, n_heads, d_model, d_head].")
    W_K = property(lambda self: _stacked(self, "attn", "W_K"), doc="[n_layers, n_heads, d_model, d_head].")
    W_V = property(lambda self: _stacked(self, "attn", "W_V"), doc="[n_layers, n_heads, d_model, d_head].")
    W_O = property(lambda self: _stacked(self, "attn", "W_O"), doc="[n_layers, n_heads, d_head, d_model].")
    b_Q = property(lambda self: _stacked(self, "attn", "b_Q"), doc="[n_layers, n_heads, d_head].")
    b_K = property(lambda self: _stacked(self, "attn", "b_K"), doc="[n_layers, n_heads, d_head].")
    b_V = property(lambda self: _stacked(self, "attn", "b_V"), doc="[n_layers, n_heads, d_head].")
    b_O = property(lambda self: _stacked(self, "attn", "b_O"), doc="[n_layers, d_model].")
    W_in = property(lambda self: _stacked(self, "mlp", "W_in"), doc="[n_layers, d_model, d_mlp].")
    W_out = property(lambda self: _stacked(self, "mlp", "W_out"), doc="[n_layers, d_mlp, d_model].")
    b_in = property(lambda self: _stacked(self, "mlp", "b_in"), doc="[n_layers, d_mlp].")
    b_out = property(lambda self: _stacked(self, "mlp", "b_out"), doc="[n_layers, d_model].")

    @property
    def W_gate(self) -> Array | None:
        """A gated MLP's gate weights [n_layers, d_model, d_mlp]; None for an ungated MLP."""
        return _stacked(self, "mlp", "W_gate") if self.model.config.gated else None

    @property
    def QK(self) -> FactoredMatrix:
        """Every head's QK circuit W_Q @ W_Kᵀ, [n_layers, n_heads, d_model, d_model]."""
        return FactoredMatrix(self.W_Q, jnp.swapaxes(self.W_K, -1, -2))

    @property
    def OV(self) -> FactoredMatrix:
        """Every head's OV circuit W_V @ W_O, [n_layers, n_heads, d_model, d_model]."""
        return FactoredMatrix(self.W_V, self.W_O)

    def tokens_to_residual_directions(self, tokens: Any) -> Array:
        """Each token's unembedding direction W_U[:, token]: [d_model] for one token (a one-token string, an int,
        a one-element array), [*tokens.shape, d_model] for an array of ids."""
        tokenizer = getattr(self, "tokenizer", None)
        view = ModelView.of(self.model, tokenizer.to_single_token if tokenizer is not None else None)
        return jnp.asarray(view.directions(tokens))

    def _repr_html_(self) -> str:
        """The model in a notebook: family, sizes, parameters, hook points, dtype (notebook_html.py)."""
        return model_html(self)

    def all_head_labels(self) -> list[str]:
        """Every head's label, `L{layer}H{head}`, layer by layer."""
        cfg = self.model.config
        return [f"L{layer}H{head}" for layer in range(cfg.n_layers) for head in range(cfg.n_heads)]
