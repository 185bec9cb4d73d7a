"""The per-family weight maps: which checkpoint tensor fills each decoder leaf, and how it is laid out.

A map is {leaf path: (tensor name, transform)}, the transform a NumPy function of the stored array (a view
where it can be: transposes, reshapes, slices of fused projections), applied one leaf at a time.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...errors import UsageError
from .config import DecoderConfig

__all__ = ["Source", "WeightMap", "weight_map"]

Transform = Callable[[np.ndarray], np.ndarray]
Source = tuple[str, Transform]
WeightMap = dict[str, Source]


def same(w: np.ndarray) -> np.ndarray:
    """The tensor as stored."""
    return w


def linear(*out: int) -> Transform:
    """A torch Linear weight [out, in] as a kernel [in, *out]."""
    return lambda w: w.T.reshape(w.shape[1], *out)


def linear_in(*ins: int) -> Transform:
    """A torch Linear weight [out, in] whose inputs are split [*ins] (the heads of an output projection)."""
    return lambda w: w.T.reshape(*ins, w.shape[0])


def shaped(*shape: int) -> Transform:
    """The tensor reshaped (a bias over heads)."""
    return lambda w: w.reshape(shape)


def _norm(into: WeightMap, leaf: str, name: str, bias: bool) -> None:
    into[f"{leaf}/scale"] = (f"{name}.weight", same)
    if bias:
        into[f"{leaf}/bias"] = (f"{name}.bias", same)


def _embeddings(cfg: DecoderConfig, into: WeightMap, embed: str, final: str, head: str) -> WeightMap:
    into["embed/embedding"] = (embed, same)
    _norm(into, "ln_final", final, cfg.norm == "layernorm")
    if not cfg.tied:
        into["unembed/kernel"] = (head, lambda w: w.T)
    return into


def gpt2(cfg: DecoderConfig) -> WeightMap:
    """GPT-2's Conv1D layout ([in, out]) and fused c_attn [d_model, 3 d_model]."""
    d, h, k = cfg.d_model, cfg.n_heads, cfg.d_head
    out: WeightMap = {"pos_embed/embedding": ("transformer.wpe.weight", same)}
    for i in range(cfg.n_layers):
        p, b = f"transformer.h.{i}", f"blocks/{i}"
        _norm(out, f"{b}/ln1", f"{p}.ln_1", True)
        _norm(out, f"{b}/ln2", f"{p}.ln_2", True)
        for j, name in enumerate(("query", "key", "value")):
            out[f"{b}/attn/{name}/kernel"] = (f"{p}.attn.c_attn.weight",
                                              lambda w, j=j: w[:, j * d:(j + 1) * d].reshape(d, h, k))
            out[f"{b}/attn/{name}/bias"] = (f"{p}.attn.c_attn.bias", lambda w, j=j: w[j * d:(j + 1) * d].reshape(h, k))
        out[f"{b}/attn/out/kernel"] = (f"{p}.attn.c_proj.weight", shaped(h, k, d))
        out[f"{b}/attn/out/bias"] = (f"{p}.attn.c_proj.bias", same)
        for ours, theirs in (("fc_in", "c_fc"), ("fc_out", "c_proj")):
            out[f"{b}/mlp/{ours}/kernel"] = (f"{p}.mlp.{theirs}.weight", same)
            out[f"{b}/mlp/{ours}/bias"] = (f"{p}.mlp.{theirs}.bias", same)
    return _embeddings(cfg, out, "transformer.wte.weight", "transformer.ln_f", "lm_head.weight")


def gpt_neox(cfg: DecoderConfig) -> WeightMap:
    """GPT-NeoX's query_key_value [heads x (q, k, v) x d_head, d_model], fused per head."""
    d, h, k = cfg.d_model, cfg.n_heads, cfg.d_head
    out: WeightMap = {}
    for i in range(cfg.n_layers):
        p, b = f"gpt_neox.layers.{i}", f"blocks/{i}"
        _norm(out, f"{b}/ln1", f"{p}.input_layernorm", True)
        _norm(out, f"{b}/ln2", f"{p}.post_attention_layernorm", True)
        for j, name in enumerate(("query", "key", "value")):
            out[f"{b}/attn/{name}/kernel"] = (f"{p}.attention.query_key_value.weight",
                                              lambda w, j=j: w.reshape(h, 3, k, d)[:, j].transpose(2, 0, 1))
            if cfg.qkv_bias:
                out[f"{b}/attn/{name}/bias"] = (f"{p}.attention.query_key_value.bias",
                                                lambda w, j=j: w.reshape(h, 3, k)[:, j])
        out[f"{b}/attn/out/kernel"] = (f"{p}.attention.dense.weight", linear_in(h, k))
        if cfg.out_bias:
            out[f"{b}/attn/out/bias"] = (f"{p}.attention.dense.bias", same)
        for ours, theirs in (("fc_in", "dense_h_to_4h"), ("fc_out", "dense_4h_to_h")):
            out[f"{b}/mlp/{ours}/kernel"] = (f"{p}.mlp.{theirs}.weight", lambda w: w.T)
            out[f"{b}/mlp/{ours}/bias"] = (f"{p}.mlp.{theirs}.bias", same)
    return _embeddings(cfg, out, "gpt_neox.embed_in.weight", "gpt_neox.final_layer_norm", "embed_out.weight")


def llama_like(cfg: DecoderConfig) -> WeightMap:
    """Llama's names, shared by Mistral, Qwen 2/3 and Gemma 1-3 (Gemma 2/3 add post norms)."""
    h, g, k = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
    out: WeightMap = {}
    for i in range(cfg.n_layers):
        p, b = f"model.layers.{i}", f"blocks/{i}"
        _norm(out, f"{b}/ln1", f"{p}.input_layernorm", False)
        if cfg.post_norms:
            _norm(out, f"{b}/ln1_post", f"{p}.post_attention_layernorm", False)
            _norm(out, f"{b}/ln2", f"{p}.pre_feedforward_layernorm", False)
            _norm(out, f"{b}/ln2_post", f"{p}.post_feedforward_layernorm", False)
        else:
            _norm(out, f"{b}/ln2", f"{p}.post_attention_layernorm", False)
        for ours, theirs, heads in (("query", "q_proj", h), ("key", "k_proj", g), ("value", "v_proj", g)):
            out[f"{b}/attn/{ours}/kernel"] = (f"{p}.self_attn.{theirs}.weight", linear(heads, k))
            if cfg.qkv_bias:
                out[f"{b}/attn/{ours}/bias"] = (f"{p}.self_attn.{theirs}.bias", shaped(heads, k))
        out[f"{b}/attn/out/kernel"] = (f"{p}.self_attn.o_proj.weight", linear_in(h, k))
        if cfg.out_bias:
            out[f"{b}/attn/out/bias"] = (f"{p}.self_attn.o_proj.bias", same)
        if cfg.qk_norm:
            _norm(out, f"{b}/attn/q_norm", f"{p}.self_attn.q_norm", False)
            _norm(out, f"{b}/attn/k_norm", f"{p}.self_attn.k_norm", False)
        for ours, theirs in (("gate", "gate_proj"), ("fc_in", "up_proj"), ("fc_out", "down_proj")):
            out[f"{b}/mlp/{ours}/kernel"] = (f"{p}.mlp.{theirs}.weight", lambda w: w.T)
            if cfg.mlp_bias:
                out[f"{b}/mlp/{ours}/bias"] = (f"{p}.mlp.{theirs}.bias", same)
    return _embeddings(cfg, out, "model.embed_tokens.weight", "model.norm", "lm_head.weight")


_MAPS: dict[str, Callable[[DecoderConfig], WeightMap]] = {"gpt2": gpt2, "gpt_neox": gpt_neox}


def weight_map(cfg: DecoderConfig) -> WeightMap:
    """The weight map of a DecoderConfig's family."""
    if cfg.family in _MAPS:
        return _MAPS[cfg.family](cfg)
    if cfg.family in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3"):
        return llama_like(cfg)
    raise UsageError(f"no weight map for family {cfg.family!r}")
