"""The one architecture-generic decoder (Equinox): every supported family is a DecoderConfig, not a copy.

Module paths follow the reference Transformers (`embed`, `blocks/{i}`, `blocks/{i}/attn` with `query`, `key`,
`value`, `out`, `blocks/{i}/mlp` with `fc_in`, `fc_out`, `ln_final`, `unembed`), and identity hook points carry
TransformerLens's names (`blocks/{i}/hook_resid_post`, `blocks/{i}/attn/hook_pattern`, `blocks/{i}/ln1/hook_scale`),
so `blocks.3.hook_resid_post` names `blocks/3/hook_resid_post`. The forward can start from the residual stream
entering any block (`resid=`, `start_at_layer=`) and stop before any (`stop_at_layer=`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from ..equinox.layers import Dense, Embed
from .attention import KV, Attention, config_norm
from .config import DecoderConfig
from .heads import attention_input
from .layers import ACTIVATIONS, Hook, Norm

Array = jax.Array

__all__ = ["KV", "Attention", "Block", "Decoder", "MLP", "Unembed", "positions_of"]


def positions_of(attention_mask: Array | None, batch: int, seq: int) -> Array:
    """Position ids [batch, seq]: counted over the unmasked tokens (left padding starts at 0), else 0..seq-1."""
    if attention_mask is None:
        return jnp.broadcast_to(jnp.arange(seq), (batch, seq))
    return jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=-1) - 1, 0)


class MLP(eqx.Module):
    """act(gate x) * fc_in x -> fc_out (gated: Llama, Gemma) or act(fc_in x) -> fc_out (GPT-2, GPT-NeoX).

    `hook_pre` is the activation's input, `hook_pre_linear` the gated MLP's linear branch, `hook_post` the neurons.
    """

    fc_in: Dense
    gate: Dense | None
    fc_out: Dense
    hook_pre: Hook
    hook_pre_linear: Hook
    hook_post: Hook
    activation: str = eqx.field(static=True)

    def __init__(self, cfg: DecoderConfig, *, key: Array) -> None:
        k_in, k_gate, k_out = jax.random.split(key, 3)
        self.fc_in = Dense(cfg.d_model, cfg.d_mlp, use_bias=cfg.mlp_bias, key=k_in)
        self.gate = Dense(cfg.d_model, cfg.d_mlp, use_bias=cfg.mlp_bias, key=k_gate) if cfg.gated else None
        self.fc_out = Dense(cfg.d_mlp, cfg.d_model, use_bias=cfg.mlp_bias, key=k_out)
        self.hook_pre, self.hook_pre_linear, self.hook_post = Hook(), Hook(), Hook()
        self.activation = cfg.activation

    def __call__(self, x: Array) -> Array:
        """Apply the MLP to x [..., d_model]."""
        act = ACTIVATIONS[self.activation]
        if self.gate is None:
            post = act(self.hook_pre(self.fc_in(x)))
        else:
            post = act(self.hook_pre(self.gate(x))) * self.hook_pre_linear(self.fc_in(x))
        return self.fc_out(self.hook_post(post))


class Block(eqx.Module):
    """One residual block, sequential (x + attn, then + mlp) or parallel (x + attn(ln1 x) + mlp(ln2 x))."""

    ln1: Norm
    attn: Attention
    ln1_post: Norm | None
    ln2: Norm
    mlp: MLP
    ln2_post: Norm | None
    hook_resid_pre: Hook
    hook_attn_in: Hook
    hook_attn_out: Hook
    hook_resid_mid: Hook
    hook_mlp_in: Hook
    hook_mlp_out: Hook
    hook_resid_post: Hook
    parallel: bool = eqx.field(static=True)

    def __init__(self, cfg: DecoderConfig, layer: int, *, key: Array) -> None:
        k_attn, k_mlp = jax.random.split(key)
        self.ln1, self.ln2 = config_norm(cfg), config_norm(cfg)
        self.attn = Attention(cfg, layer, key=k_attn)
        self.mlp = MLP(cfg, key=k_mlp)
        self.ln1_post = config_norm(cfg) if cfg.post_norms else None
        self.ln2_post = config_norm(cfg) if cfg.post_norms else None
        (self.hook_resid_pre, self.hook_attn_out, self.hook_resid_mid, self.hook_mlp_in, self.hook_mlp_out,
         self.hook_resid_post, self.hook_attn_in) = (Hook() for _ in range(7))
        self.parallel = cfg.parallel

    def __call__(self, x: Array, attention_mask: Array | None, positions: Array, cache: KV | None = None,
                 index: Array | int = 0) -> Array:
        """Update the residual stream x [b, s, d_model] (attending over `cache`, x written at slot `index`, when
        one is given: the output is one array either way, and `write` gives the updated cache)."""
        x = self.hook_resid_pre(x)
        attended = self.attn(attention_input(self, x), attention_mask, positions, cache, index)
        return self._update(x, attended)

    def write(self, x: Array, positions: Array, cache: KV, index: Array | int) -> KV:
        """The layer's cache with the keys and values of the rows x [b, s, d_model] written at slot `index`."""
        return self.attn.write(attention_input(self, self.hook_resid_pre(x)), positions, cache, index)

    def step(self, x: Array, mask: Array, context: Array | tuple[Array, ...] | None, positions: Array,
             keyed: int | None = None) -> Array:
        """The block on rows x [..., rows, d_model] that attend to `context` (the stream before them: one array
        or parts in order) and x's first `keyed` rows under `mask`, at `positions` (Attention.step;
        capture.packed)."""
        parts = () if context is None else context if isinstance(context, tuple) else (context,)
        attended = self.attn.step(self.ln1(x), mask, [self.ln1(part) for part in parts], positions, keyed)
        return self._update(x, attended)

    def _update(self, x: Array, attended: Array) -> Array:
        """The block's output from its input x and its attention's output (the post-norm, then the MLP)."""
        if self.ln1_post is not None:
            attended = self.ln1_post(attended)
        attended = self.hook_attn_out(attended)
        if self.parallel:
            out = self.hook_mlp_out(self._mlp(x)) + attended + x
        else:
            x = self.hook_resid_mid(x + attended)
            out = x + self.hook_mlp_out(self._mlp(x))
        return self.hook_resid_post(out)

    def _mlp(self, resid: Array) -> Array:
        y = self.mlp(self.ln2(self.hook_mlp_in(resid)))
        return y if self.ln2_post is None else self.ln2_post(y)


class Unembed(eqx.Module):
    """Logits from the final residual: x . kernel (+ bias), or x . embeddingᵀ when tied; Gemma 2's final soft-cap.

    Checkpoints have no unembedding bias; folding a LayerNorm's bias into the unembedding makes one.
    """

    kernel: Array | None
    bias: Array | None
    softcap: float | None = eqx.field(static=True)

    def __init__(self, cfg: DecoderConfig, *, key: Array) -> None:
        init = jax.nn.initializers.lecun_normal()
        self.kernel = None if cfg.tied else init(key, (cfg.d_model, cfg.vocab_size), jnp.float32)
        self.bias = None
        self.softcap = cfg.final_softcap

    def __call__(self, x: Array, embedding: Array | None = None) -> Array:
        """Logits [..., vocab] of x [..., d_model]; `embedding` [vocab, d_model] is used when tied."""
        logits = x @ (self.kernel if self.kernel is not None else embedding.T)
        if self.bias is not None:
            logits = logits + self.bias
        if self.softcap is not None:
            logits = (jnp.tanh(logits.astype(jnp.float32) / self.softcap) * self.softcap).astype(logits.dtype)
        return logits


def _call_block(block: Block, x: Array, attention_mask: Array | None, positions: Array) -> Array:
    """One block of the forward (a function, so that remat can wrap it)."""
    return block(x, attention_mask, positions)


class Decoder(eqx.Module):
    """A decoder-only language model built from a DecoderConfig: token ids [b, s] -> logits [b, s, vocab]."""

    embed: Embed
    pos_embed: Embed | None
    hook_embed: Hook
    hook_pos_embed: Hook
    blocks: list[Block]
    ln_final: Norm | None
    unembed: Unembed
    config: DecoderConfig = eqx.field(static=True)

    def __init__(self, config: DecoderConfig, *, key: Array) -> None:
        k_embed, k_pos, k_out, *k_blocks = jax.random.split(key, 3 + config.n_layers)
        self.config = config
        self.embed = Embed(config.vocab_size, config.d_model, key=k_embed)
        self.pos_embed = Embed(config.n_positions, config.d_model, key=k_pos) if config.n_positions else None
        self.hook_embed, self.hook_pos_embed = Hook(), Hook()
        self.blocks = [Block(config, i, key=k) for i, k in enumerate(k_blocks)]
        self.ln_final = config_norm(config) if config.final_norm else None
        self.unembed = Unembed(config, key=k_out)

    def __call__(self, tokens: Array | None = None, attention_mask: Array | None = None, *,
                 resid: Array | None = None, start_at_layer: int = 0, stop_at_layer: int | None = None,
                 positions: Array | None = None, deterministic: bool = True, remat: bool = False) -> Array:
        """Logits [b, s, vocab] of tokens [b, s]; attention_mask [b, s] (1 token, 0 padding) for padded batches.

        With `resid` [b, s, d_model] (and `start_at_layer=l`) the forward starts from the residual stream
        entering block l; with `stop_at_layer=l` it returns the residual stream entering block l instead.
        `remat`: each block's activations are recomputed in the backward pass (jax.checkpoint), not kept.
        """
        if resid is None:
            if tokens is None:
                raise TypeError("Decoder() needs tokens [batch, seq], or resid= with start_at_layer=")
            batch, seq = tokens.shape
        else:
            batch, seq = resid.shape[:2]
        if positions is None:
            positions = positions_of(attention_mask, batch, seq)
        x = self.embed_tokens(tokens, positions) if resid is None else resid
        call = eqx.filter_checkpoint(_call_block) if remat else _call_block
        for block in self.blocks[start_at_layer:stop_at_layer]:
            x = call(block, x, attention_mask, positions)
        if stop_at_layer is not None and stop_at_layer < len(self.blocks):
            return x
        return self.unembed_fn(x)

    def embed_tokens(self, tokens: Array, positions: Array) -> Array:
        """The residual stream entering block 0: token (and learned position) embeddings, scaled for Gemma."""
        x = self.hook_embed(self.embed(tokens))
        if self.config.embed_scale is not None:
            x = x * jnp.asarray(self.config.embed_scale, x.dtype)
        if self.pos_embed is not None:
            x = x + self.hook_pos_embed(self.pos_embed(positions))
        return x

    def unembed_fn(self, resid: Array) -> Array:
        """Logits of a residual stream [..., d_model]: the final norm, then the unembedding (logit lens)."""
        if self.ln_final is not None:
            resid = self.ln_final(resid)
        return self.unembed(resid, self.embed.embedding)

    # -- the block structure (capture.staged.Staged): patched runs that start at a block (prefix reuse) -------------
    def block_paths(self) -> list[str]:
        """The blocks' module paths, in forward order."""
        return [f"blocks/{i}" for i in range(len(self.blocks))]

    skips_positions: ClassVar[bool] = True  # from_block takes the earlier positions' keys and values (prefix)

    def staged_on(self, *args: Any, **kwargs: Any) -> bool:
        """Runs in pieces serve unpadded token batches only (a padding mask is not passed from block to block)."""
        return len(args) == 1 and not kwargs

    def residuals(self, tokens: Array) -> tuple[Array, list[Array]]:
        """(logits, the residual stream entering each block and after the last) of tokens [b, s], unpadded."""
        positions = positions_of(None, *tokens.shape)
        stream = [self.embed_tokens(tokens, positions)]
        for block in self.blocks:
            stream.append(block(stream[-1], None, positions))
        return self.unembed_fn(stream[-1]), stream

    def prefix(self, stream: Sequence[Array], start: int, first: int) -> list[KV]:
        """The keys and values of positions 0..first-1 in blocks start.. (the unpatched run's KV cache), which
        from_block takes as `context`."""
        positions = positions_of(None, stream[0].shape[0], first)
        pairs = zip(self.blocks[start:], stream[start:-1])
        return [_extend(block, s[:, :first], positions, None) for block, s in pairs]

    def from_block(self, resid: Array, start: int, context: Sequence[KV] | None = None,
                   readout: int | None = None) -> Array:
        """Logits from `resid`, the residual stream entering block `start`; with `context` (prefix()'s caches),
        resid holds the positions after the cached ones only; `readout`: the logits at that position only
        (the later positions are never computed, and the last block computes only it)."""
        offset = context[0].k.shape[1] if context else 0
        if readout is not None:
            resid = resid[:, : readout + 1]
        positions = offset + positions_of(None, *resid.shape[:2])
        blocks = self.blocks[start:]
        for i, block in enumerate(blocks):
            cache = context[i] if context else None
            if readout is not None and i == len(blocks) - 1 and resid.shape[1] > 1:  # the read position only
                cache = _extend(block, resid[:, :-1], positions[:, :-1], cache)
                resid, positions = resid[:, -1:], positions[:, -1:]
            if cache is None:
                resid = block(resid, None, positions)
            else:
                resid = block(resid, None, positions, _grown(cache, resid.shape[1]), cache.k.shape[1])
        return self.unembed_fn(resid if readout is None else resid[:, -1])

    def block_step(self, index: int, x: Array, mask: Array, context: Array | tuple[Array, ...] | None,
                   positions: Array, keyed: int | None = None) -> Array:
        """Block `index` on rows x [..., rows, d_model] attending to `context` and x's first `keyed` rows under
        `mask`, at `positions` [..., context + rows] (capture.packed.Stepped)."""
        return self.blocks[index].step(x, mask, context, positions, keyed)

    def step(self, tokens: Array, attention_mask: Array, positions: Array, caches: list[KV],
             index: Array | int) -> tuple[Array, list[KV]]:
        """Logits of tokens [b, q] written at cache slot `index`, and the updated caches (generation)."""
        x = self.embed_tokens(tokens, positions)
        updated = []
        for block, cache in zip(self.blocks, caches):
            updated.append(block.write(x, positions, cache, index))
            x = block(x, attention_mask, positions, cache, index)
        return self.unembed_fn(x), updated


def _grown(cache: KV, slots: int) -> KV:
    """The cache with `slots` empty slots after its own."""
    pad = lambda a: jnp.concatenate([a, jnp.zeros((a.shape[0], slots, *a.shape[2:]), a.dtype)], axis=1)  # noqa: E731
    return KV(pad(cache.k), pad(cache.v))


def _extend(block: Block, x: Array, positions: Array, cache: KV | None) -> KV:
    """The cache with the keys and values of rows x [b, n, d] (at `positions`) after its slots."""
    if cache is None:
        heads, dtype = block.attn.key.kernel.shape[-2:], jnp.result_type(x.dtype, block.attn.key.kernel.dtype)
        empty = jnp.zeros((x.shape[0], 0, *heads), dtype)
        cache = KV(empty, empty)
    return block.write(x, positions, _grown(cache, x.shape[1]), cache.k.shape[1])
