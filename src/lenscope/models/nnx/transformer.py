"""The reference decoder-only transformer in Flax NNX: the linen `Transformer`'s architecture and parameters.

Module paths (attribute names and list indices joined with '/') are `embed`, `blocks/{i}`,
`blocks/{i}/attn` (with `query`, `key`, `value`, `out`), `blocks/{i}/mlp` (`fc_in`, `fc_out`) and
`unembed`; the parameter leaves are named as in linen (`kernel`, `bias`, `embedding`, `scale`,
`pos_embed`), so `lenscope.models.convert` moves weights between the libraries.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
from flax import nnx

from ..transformer import BlockStages, Context, map_context, residual, self_attention
from .rngs import require_rngs

Array = jax.Array


class Attention(nnx.Module):
    """Multi-head self-attention: `query`, `key`, `value` [d_model -> heads x d_head] and `out` back to d_model."""

    def __init__(self, d_model: int, n_heads: int, d_head: int, *, rngs: nnx.Rngs | None = None) -> None:
        rngs = require_rngs(rngs, type(self))
        heads = (n_heads, d_head)
        self.query = nnx.LinearGeneral(d_model, heads, use_bias=False, rngs=rngs)
        self.key = nnx.LinearGeneral(d_model, heads, use_bias=False, rngs=rngs)
        self.value = nnx.LinearGeneral(d_model, heads, use_bias=False, rngs=rngs)
        self.out = nnx.LinearGeneral(heads, d_model, axis=(-2, -1), use_bias=False, rngs=rngs)

    def __call__(self, x: Array, mask: Array | None = None, return_pattern: bool = False,
                 context: Context | None = None, keyed: int | None = None) -> Array | tuple[Array, Array]:
        """Attend over x [..., seq, d_model] (and `context`, earlier positions; `keyed`: see self_attention);
        with return_pattern, also the pattern [..., heads, q, k]."""
        y, pattern = self_attention(self, x, mask, context, keyed)
        return (y, pattern) if return_pattern else y


class MLP(nnx.Module):
    """Position-wise feed-forward: Linear `fc_in` (d_mlp), activation, Linear `fc_out` (d_model)."""

    def __init__(self, d_model: int, d_mlp: int, activation: Callable[[Array], Array] = jax.nn.relu, *,
                 rngs: nnx.Rngs | None = None) -> None:
        rngs = require_rngs(rngs, type(self))
        self.fc_in = nnx.Linear(d_model, d_mlp, rngs=rngs)
        self.fc_out = nnx.Linear(d_mlp, d_model, rngs=rngs)
        self.activation = activation

    def __call__(self, x: Array) -> Array:
        """Apply the MLP to x [..., d_model]."""
        return self.fc_out(self.activation(self.fc_in(x)))


class Block(nnx.Module):
    """One residual block: x + attn(ln1(x)), then x + mlp(ln2(x)); LayerNorms only when `use_ln`."""

    def __init__(self, d_model: int, n_heads: int, d_head: int, d_mlp: int, use_ln: bool = False, *,
                 rngs: nnx.Rngs | None = None) -> None:
        rngs = require_rngs(rngs, type(self))
        self.attn = Attention(d_model, n_heads, d_head, rngs=rngs)
        self.mlp = MLP(d_model, d_mlp, rngs=rngs)
        self.ln1 = nnx.LayerNorm(d_model, epsilon=1e-6, rngs=rngs) if use_ln else None
        self.ln2 = nnx.LayerNorm(d_model, epsilon=1e-6, rngs=rngs) if use_ln else None

    def __call__(self, x: Array, mask: Array | None = None, context: Context | None = None,
                 keyed: int | None = None) -> Array:
        """Update the residual stream x [..., seq, d_model]; `context`: the stream at earlier positions (keys only);
        `keyed`: only x's first rows give keys (self_attention)."""
        norm = self.ln1 if self.ln1 is not None else (lambda y: y)
        x = x + self.attn(norm(x), mask, context=map_context(norm, context), keyed=keyed)
        return x + self.mlp(self.ln2(x) if self.ln2 is not None else x)


class Transformer(BlockStages, nnx.Module):
    """Decoder-only transformer over integer tokens, returning logits [batch, seq, n_out or vocab_size].

    Built with its `nnx.Rngs` (`Transformer(..., rngs=nnx.Rngs(seed))`). There is no dropout:
    `deterministic` is accepted so trainers can pass it uniformly.
    """

    def __init__(self, vocab_size: int, seq_len: int, d_model: int, n_heads: int, d_head: int, d_mlp: int,
                 n_layers: int, n_out: int | None = None, use_ln: bool = False, *,
                 rngs: nnx.Rngs | None = None) -> None:
        rngs = require_rngs(rngs, type(self))
        self.seq_len = seq_len
        self.embed = nnx.Embed(vocab_size, d_model, rngs=rngs)
        init = jax.nn.initializers.normal(1.0 / math.sqrt(d_model))
        self.pos_embed = nnx.Param(init(rngs.params(), (seq_len, d_model)))
        self.blocks = nnx.List([Block(d_model, n_heads, d_head, d_mlp, use_ln, rngs=rngs) for _ in range(n_layers)])
        self.ln_final = nnx.LayerNorm(d_model, epsilon=1e-6, rngs=rngs) if use_ln else None
        self.unembed = nnx.Linear(d_model, n_out or vocab_size, use_bias=False, rngs=rngs)

    def __call__(self, tokens: Array, *, deterministic: bool = True) -> Array:
        """Logits for every position of tokens [batch, seq] (seq <= seq_len), causally masked."""
        x = residual(self, tokens, self.pos_embed)
        if self.ln_final is not None:
            x = self.ln_final(x)
        return self.unembed(x)

    def unembed_fn(self, resid: Array) -> Array:
        """Project a residual stream [..., d_model] to logits: ln_final (if any) then unembed; for logit lens."""
        if self.ln_final is not None:
            resid = self.ln_final(resid)
        return self.unembed(resid)
