"""The reference decoder-only transformer in Equinox: the linen `Transformer`'s architecture and parameters.

Module paths (field names and list indices joined with '/') are `embed`, `blocks/{i}`,
`blocks/{i}/attn` (with `query`, `key`, `value`, `out`), `blocks/{i}/mlp` (`fc_in`, `fc_out`) and
`unembed`; parameters are named as in linen, so `lenscope.models.convert` moves weights between the
libraries. Layers work on batched inputs like linen's, so no vmap is needed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import equinox as eqx
import jax

from ..transformer import BlockStages, Context, map_context, residual, self_attention
from .layers import Dense, Embed, LayerNorm

Array = jax.Array


class Attention(eqx.Module):
    """Multi-head self-attention: `query`, `key`, `value` [d_model -> heads x d_head] and `out` back to d_model."""

    query: Dense
    key: Dense
    value: Dense
    out: Dense

    def __init__(self, d_model: int, n_heads: int, d_head: int, *, key: Array) -> None:
        keys = jax.random.split(key, 4)
        heads = (n_heads, d_head)
        self.query = Dense(d_model, heads, use_bias=False, key=keys[0])
        self.key = Dense(d_model, heads, use_bias=False, key=keys[1])
        self.value = Dense(d_model, heads, use_bias=False, key=keys[2])
        self.out = Dense(heads, d_model, axis=(-2, -1), use_bias=False, key=keys[3])

    def __call__(self, x: Array, mask: Array | None = None, return_pattern: bool = False,
                 context: Context | None = None, keyed: int | None = None) -> Array | tuple[Array, Array]:
        """Attend over x [..., seq, d_model] (and `context`, earlier positions; `keyed`: see self_attention);
        with return_pattern, also the pattern [..., heads, q, k]."""
        y, pattern = self_attention(self, x, mask, context, keyed)
        return (y, pattern) if return_pattern else y


class MLP(eqx.Module):
    """Position-wise feed-forward: Dense `fc_in` (d_mlp), activation, Dense `fc_out` (d_model)."""

    fc_in: Dense
    fc_out: Dense
    activation: Callable[[Array], Array]  # a non-array leaf of the PyTree, rebuilt from the definition

    def __init__(self, d_model: int, d_mlp: int, activation: Callable[[Array], Array] = jax.nn.relu, *,
                 key: Array) -> None:
        k_in, k_out = jax.random.split(key)
        self.fc_in = Dense(d_model, d_mlp, key=k_in)
        self.fc_out = Dense(d_mlp, d_model, key=k_out)
        self.activation = activation

    def __call__(self, x: Array) -> Array:
        """Apply the MLP to x [..., d_model]."""
        return self.fc_out(self.activation(self.fc_in(x)))


class Block(eqx.Module):
    """One residual block: x + attn(ln1(x)), then x + mlp(ln2(x)); LayerNorms only when `use_ln`."""

    attn: Attention
    mlp: MLP
    ln1: LayerNorm | None
    ln2: LayerNorm | None

    def __init__(self, d_model: int, n_heads: int, d_head: int, d_mlp: int, use_ln: bool = False, *,
                 key: Array) -> None:
        k_attn, k_mlp = jax.random.split(key)
        self.attn = Attention(d_model, n_heads, d_head, key=k_attn)
        self.mlp = MLP(d_model, d_mlp, key=k_mlp)
        self.ln1 = LayerNorm(d_model) if use_ln else None
        self.ln2 = LayerNorm(d_model) if use_ln else None

    def __call__(self, x: Array, mask: Array | None = None, context: Context | None = None,
                 keyed: int | None = None) -> Array:
        """Update the residual stream x [..., seq, d_model]; `context`: the stream at earlier positions (keys only);
        `keyed`: only x's first rows give keys (self_attention)."""
        norm = self.ln1 if self.ln1 is not None else (lambda y: y)
        x = x + self.attn(norm(x), mask, context=map_context(norm, context), keyed=keyed)
        return x + self.mlp(self.ln2(x) if self.ln2 is not None else x)


class Transformer(BlockStages, eqx.Module):
    """Decoder-only transformer over integer tokens, returning logits [batch, seq, n_out or vocab_size].

    Built from a PRNG key (`Transformer(..., key=jax.random.key(seed))`). There is no dropout:
    `deterministic` is accepted so trainers can pass it uniformly.
    """

    embed: Embed
    pos_embed: Array
    blocks: list[Block]
    ln_final: LayerNorm | None
    unembed: Dense
    seq_len: int = eqx.field(static=True)

    def __init__(self, vocab_size: int, seq_len: int, d_model: int, n_heads: int, d_head: int, d_mlp: int,
                 n_layers: int, n_out: int | None = None, use_ln: bool = False, *, key: Array) -> None:
        k_embed, k_pos, k_out, *k_blocks = jax.random.split(key, 3 + n_layers)
        self.seq_len = seq_len
        self.embed = Embed(vocab_size, d_model, key=k_embed)
        self.pos_embed = jax.nn.initializers.normal(1.0 / math.sqrt(d_model))(k_pos, (seq_len, d_model))
        self.blocks = [Block(d_model, n_heads, d_head, d_mlp, use_ln, key=k) for k in k_blocks]
        self.ln_final = LayerNorm(d_model) if use_ln else None
        self.unembed = Dense(d_model, n_out or vocab_size, use_bias=False, key=k_out)

    def __call__(self, tokens: Array, *, deterministic: bool = True) -> Array:
        """Logits for every position of tokens [batch, seq] (seq <= seq_len), causally masked."""
        x = residual(self, tokens, self.pos_embed)
        return self.unembed_fn(x)

    def unembed_fn(self, resid: Array) -> Array:
        """Project a residual stream [..., d_model] to logits: ln_final (if any) then unembed; for logit lens."""
        if self.ln_final is not None:
            resid = self.ln_final(resid)
        return self.unembed(resid)
