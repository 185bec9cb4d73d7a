"""A small decoder-only transformer in Flax linen, written to be read and taken apart.

Module paths (as seen by method interception) are `embed`, `blocks_{i}`,
`blocks_{i}/attn`, `blocks_{i}/mlp` and `unembed`. Submodules are declared in
`setup()`, so a bound module exposes them (`layer.query(x)`, `layer.fc_in(x)`)
to analyses that want to recompute part of a layer.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from lenscope.errors import UsageError

Array = jax.Array
Dtype = Any


def causal_mask(seq_len: int) -> Array:
    """Boolean [seq, seq] mask, True where query position i may attend to key position j <= i."""
    return jnp.tril(jnp.ones((seq_len, seq_len), dtype=bool))


def attention_pattern(q: Array, k: Array, mask: Array | None = None) -> Array:
    """Softmax attention weights [..., heads, q_len, k_len] from q [..., q_len, heads, d] and k [..., k_len, heads, d].

    `mask` is boolean (True = may attend) and broadcasts against the scores
    [..., heads, q_len, k_len]; a [q_len, k_len] causal mask works as is.
    Softmax is taken in float32 whatever the input dtype.
    """
    scores = jnp.einsum("...qhd,...khd->...hqk", q, k).astype(jnp.float32)
    scores = scores / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
    return jax.nn.softmax(scores, axis=-1)


def check_length(tokens: Array, seq_len: int) -> int:
    """The length of tokens [..., seq]; a UsageError when it exceeds the model's seq_len."""
    seq = tokens.shape[-1]
    if seq > seq_len:
        raise UsageError(
            f"Transformer got tokens of length {seq} but seq_len={seq_len}; "
            f"pass at most {seq_len} positions or build the model with seq_len >= {seq}"
        )
    return seq


Context = Array | tuple[Array, ...]  # the attention's input at earlier positions: one array, or parts in order


def map_context(fn: Callable[[Array], Array], context: Context | None) -> Context | None:
    """fn on the context, or on each of its parts (a Block's norm before its attention)."""
    if context is None:
        return None
    return tuple(fn(part) for part in context) if isinstance(context, tuple) else fn(context)


def self_attention(layer: Any, x: Array, mask: Array | None = None, context: Context | None = None,
                   keyed: int | None = None) -> tuple[Array, Array]:
    """Output and pattern of attention through `layer`'s query, key, value and out projections (every library's).

    `context`: the attention's input at the positions before x's (their keys and values), for a run that
    starts at a later position; the mask is then [x positions, context + x positions]. A context part with
    fewer leading axes than x (size 1: shared by many runs' rows, capture.packed) is projected once, then
    broadcast; a tuple holds several parts, in key order, before x. `keyed`: only x's first `keyed` rows give
    keys and values (the mask is then [x positions, context + keyed]); the rest only attend, their own keys
    being in the context already (capture.packed: rows a patch has not reached yet).
    """
    q = layer.query(x)  # first: the projections are called (and discovered) in the order query, key, value
    parts = [] if context is None else list(context) if isinstance(context, tuple) else [context]
    lead, keys, values = x.shape[:-2], [], []
    inputs = [*parts, x if keyed is None else x[..., :keyed, :]]
    for shared, run in itertools.groupby(inputs, key=lambda part: part.shape[:-2] != lead):
        # consecutive inputs with x's leading axes are projected in one call; a shared one once, then broadcast
        for part in run if shared else [jnp.concatenate(list(run), axis=-2)]:
            for out, layer_fn in ((keys, layer.key), (values, layer.value)):
                projected = layer_fn(part)
                out.append(jnp.broadcast_to(projected, (*lead, *projected.shape[-3:])))
    k, v = (jnp.concatenate(found, axis=-3) if len(found) > 1 else found[0] for found in (keys, values))
    pattern = attention_pattern(q, k, mask)
    return layer.out(jnp.einsum("...hqk,...khd->...qhd", pattern.astype(v.dtype), v)), pattern


def residuals(model: Any, tokens: Array, pos_embed: Array) -> list[Array]:
    """The residual stream entering each block and after the last (n_layers + 1 arrays [..., seq, d_model]):
    embed + positions, then every block under a causal mask.

    `model` is any library's Transformer here (its `embed`, `blocks` and `seq_len`).
    """
    seq = check_length(tokens, model.seq_len)
    x = model.embed(tokens)
    x = x + pos_embed[:seq].astype(x.dtype)
    mask = causal_mask(seq)
    stream = [x]
    for block in model.blocks:
        x = block(x, mask)
        stream.append(x)
    return stream


def residual(model: Any, tokens: Array, pos_embed: Array) -> Array:
    """The residual stream after the last block (the last of `residuals`)."""
    return residuals(model, tokens, pos_embed)[-1]


def residual_from(model: Any, x: Array, start: int, context: Sequence[Array] | None = None,
                  readout: int | None = None) -> Array:
    """The residual stream after the last block, from x, the stream entering block `start` (0..n_layers).

    With `context` (causal reuse), x holds only the positions from `first` = context[0]'s length on, and
    context[i] is the stream entering block start + i at the positions before: under the causal mask those
    are what a change from position `first` on cannot reach, so the run computes only the later positions.
    With `readout` (an index into x's positions), only that position's stream [..., d_model] is returned:
    the positions after it are never computed, and the last block computes only it.
    """
    blocks = list(model.blocks)[start:]
    if readout is not None:
        x = x[..., : readout + 1, :]
        if not blocks:
            return x[..., -1, :]
    for i, block in enumerate(blocks):
        before = context[i] if context else None
        if readout is not None and i == len(blocks) - 1:  # the last block: only the read position is needed
            before = x[..., :-1, :] if before is None else jnp.concatenate([before, x[..., :-1, :]], axis=-2)
            x = x[..., -1:, :]
        offset = 0 if before is None else before.shape[-2]
        mask = causal_mask(offset + x.shape[-2])[offset:]
        x = block(x, mask) if before is None else block(x, mask, before)
    return x[..., -1, :] if readout is not None else x


class BlockStages:
    """The block structure every library's reference Transformer offers (capture.staged.Staged): its forward in
    pieces, and runs that start at the residual stream entering a block (prefix reuse; TransformerLens's
    start_at_layer). Needs `blocks`, `pos_embed` and `unembed_fn`; BLOCK_PATH formats a block's module path."""

    BLOCK_PATH: ClassVar[str] = "blocks/{}"
    skips_positions: ClassVar[bool] = True  # from_block takes the earlier positions as attention context

    def block_paths(self) -> list[str]:
        """The blocks' module paths, in forward order."""
        return [self.BLOCK_PATH.format(i) for i in range(len(self.blocks))]  # type: ignore[attr-defined]

    def staged_on(self, *args: Any) -> bool:
        """Every forward (tokens) runs in pieces."""
        return True

    def residuals(self, tokens: Array, *, deterministic: bool = True) -> tuple[Array, list[Array]]:
        """(logits, the residual stream entering each block and after the last): the forward, kept in pieces."""
        stream = residuals(self, tokens, self.pos_embed)  # type: ignore[attr-defined]
        return self.unembed_fn(stream[-1]), stream  # type: ignore[attr-defined]

    def prefix(self, stream: Sequence[Array], start: int, first: int) -> list[Array]:
        """The stream entering blocks start.. at positions 0..first-1: what from_block takes as `context`."""
        return [s[:, :first] for s in stream[start:-1]]

    def from_block(self, resid: Array, start: int, context: Sequence[Array] | None = None,
                   readout: int | None = None) -> Array:
        """Logits from `resid`, the residual stream entering block `start` (see residual_from); with `readout`,
        the logits [batch, vocab] at that position only."""
        return self.unembed_fn(residual_from(self, resid, start, context, readout))  # type: ignore[attr-defined]

    def block_step(self, index: int, x: Array, mask: Array, context: Context | None,
                   positions: Array | None = None, keyed: int | None = None) -> Array:
        """Block `index` on rows x [..., rows, d] attending to `context` (before them) and x's first `keyed` rows
        (all: None) under `mask` [..., rows, context + keyed] (capture.packed); `positions` are not needed
        (learned, added at the input)."""
        return self.blocks[index](x, mask, context, keyed)  # type: ignore[attr-defined]


class Attention(nn.Module):
    """Multi-head self-attention: `query`, `key`, `value` [d_model -> heads x d_head] and `out` back to d_model."""

    d_model: int
    n_heads: int
    d_head: int
    dtype: Dtype = jnp.float32

    def setup(self) -> None:
        heads = (self.n_heads, self.d_head)
        self.query = nn.DenseGeneral(heads, use_bias=False, dtype=self.dtype)
        self.key = nn.DenseGeneral(heads, use_bias=False, dtype=self.dtype)
        self.value = nn.DenseGeneral(heads, use_bias=False, dtype=self.dtype)
        self.out = nn.DenseGeneral(
            self.d_model, axis=(-2, -1), use_bias=False, dtype=self.dtype,
        )

    def __call__(
        self, x: Array, mask: Array | None = None, return_pattern: bool = False, context: Context | None = None,
        keyed: int | None = None,
    ) -> Array | tuple[Array, Array]:
        """Attend over x [..., seq, d_model] (and `context`, earlier positions; `keyed`: see self_attention); the
        pattern is sown as intermediates/pattern and optionally returned."""
        y, pattern = self_attention(self, x, mask, context, keyed)
        self.sow("intermediates", "pattern", pattern)
        return (y, pattern) if return_pattern else y


class MLP(nn.Module):
    """Position-wise feed-forward: Dense `fc_in` (d_mlp), activation, Dense `fc_out` (d_model)."""

    d_model: int
    d_mlp: int
    activation: Callable[[Array], Array] = nn.relu
    dtype: Dtype = jnp.float32

    def setup(self) -> None:
        self.fc_in = nn.Dense(self.d_mlp, dtype=self.dtype)
        self.fc_out = nn.Dense(self.d_model, dtype=self.dtype)

    def __call__(self, x: Array) -> Array:
        """Apply the MLP to x [..., d_model]."""
        return self.fc_out(self.activation(self.fc_in(x)))


class Block(nn.Module):
    """One residual block: x + attn(ln1(x)), then x + mlp(ln2(x)); LayerNorms only when `use_ln`."""

    d_model: int
    n_heads: int
    d_head: int
    d_mlp: int
    use_ln: bool = False
    dtype: Dtype = jnp.float32

    def setup(self) -> None:
        self.attn = Attention(self.d_model, self.n_heads, self.d_head, dtype=self.dtype)
        self.mlp = MLP(self.d_model, self.d_mlp, dtype=self.dtype)
        if self.use_ln:
            self.ln1 = nn.LayerNorm(dtype=self.dtype)
            self.ln2 = nn.LayerNorm(dtype=self.dtype)

    def __call__(self, x: Array, mask: Array | None = None, context: Context | None = None,
                 keyed: int | None = None) -> Array:
        """Update the residual stream x [..., seq, d_model]; `context`: the stream at earlier positions (keys only);
        `keyed`: only x's first rows give keys (self_attention)."""
        norm = self.ln1 if self.use_ln else (lambda y: y)
        x = x + self.attn(norm(x), mask, context=map_context(norm, context), keyed=keyed)
        x = x + self.mlp(self.ln2(x) if self.use_ln else x)
        return x


class Transformer(BlockStages, nn.Module):
    """Decoder-only transformer over integer tokens, returning logits [batch, seq, n_out or vocab_size].

    There is no dropout: `deterministic` is accepted so trainers can pass it uniformly.
    """

    vocab_size: int
    seq_len: int
    d_model: int
    n_heads: int
    d_head: int
    d_mlp: int
    n_layers: int
    n_out: int | None = None
    use_ln: bool = False
    dtype: Dtype = jnp.float32
    BLOCK_PATH: ClassVar[str] = "blocks_{}"

    def setup(self) -> None:
        self.embed = nn.Embed(self.vocab_size, self.d_model, dtype=self.dtype)
        self.pos_embed = self.param(
            "pos_embed", nn.initializers.normal(1.0 / math.sqrt(self.d_model)),
            (self.seq_len, self.d_model),
        )
        self.blocks = [
            Block(self.d_model, self.n_heads, self.d_head, self.d_mlp,
                  use_ln=self.use_ln, dtype=self.dtype)
            for _ in range(self.n_layers)
        ]
        if self.use_ln:
            self.ln_final = nn.LayerNorm(dtype=self.dtype)
        self.unembed = nn.Dense(self.n_out or self.vocab_size, use_bias=False, dtype=self.dtype)

    def __call__(self, tokens: Array, *, deterministic: bool = True) -> Array:
        """Logits for every position of tokens [batch, seq] (seq <= seq_len), causally masked."""
        x = residual(self, tokens, self.pos_embed)
        # Same two steps as unembed_fn, inlined so the forward does not invoke
        # another method of the root module (interceptors would record it).
        if self.use_ln:
            x = self.ln_final(x)
        return self.unembed(x)

    def unembed_fn(self, resid: Array) -> Array:
        """Project a residual stream [..., d_model] to logits: ln_final (if any) then unembed; for logit lens."""
        if self.use_ln:
            resid = self.ln_final(resid)
        return self.unembed(resid)
