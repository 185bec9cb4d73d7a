"""The per-family weight maps: which checkpoint tensor fills each decoder leaf, and how it is laid out.

A map is {leaf path: (tensor name, transform)}, the transform a NumPy function of the stored array (a view
where it can be: transposes, reshapes, slices of fused projections), applied one leaf at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import UsageError
from .config import DecoderConfig

__all__ = ["GPT2", "NEOX", "FusedNames", "Source", "WeightMap", "weight_map"]

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


def _linear(into: WeightMap, leaf: str, name: str, kernel: Transform, bias: bool) -> None:
    """A projection: `name.weight` laid out by `kernel`, and `name.bias` as stored when there is one."""
    into[f"{leaf}/kernel"] = (f"{name}.weight", kernel)
    if bias:
        into[f"{leaf}/bias"] = (f"{name}.bias", same)


def _fused(into: WeightMap, block: str, name: str, kernel: Callable[[int], Transform],
           bias: Callable[[int], Transform] | None) -> None:
    """Query, key and value cut from one fused tensor: part j of `name.weight` (and `name.bias`)."""
    for j, part in enumerate(("query", "key", "value")):
        into[f"{block}/attn/{part}/kernel"] = (f"{name}.weight", kernel(j))
        if bias is not None:
            into[f"{block}/attn/{part}/bias"] = (f"{name}.bias", bias(j))


def _embeddings(cfg: DecoderConfig, into: WeightMap, embed: str, final: str, head: str) -> WeightMap:
    into["embed/embedding"] = (embed, same)
    _norm(into, "ln_final", final, cfg.norm == "layernorm")
    if not cfg.tied:
        into["unembed/kernel"] = (head, lambda w: w.T)
    return into


@dataclass(frozen=True)
class FusedNames:
    """Where a family with fused query/key/value (GPT-2, GPT-NeoX) keeps each tensor of layer i (`{i}`)."""

    layer: str
    ln1: str
    ln2: str
    qkv: str
    out: str
    fc_in: str
    fc_out: str
    head: tuple[str, str, str]  # embedding, final norm, unembedding
    positions: str | None = None


GPT2 = FusedNames("transformer.h.{i}", "ln_1", "ln_2", "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj",
                  ("transformer.wte.weight", "transformer.ln_f", "lm_head.weight"), "transformer.wpe.weight")
NEOX = FusedNames("gpt_neox.layers.{i}", "input_layernorm", "post_attention_layernorm",
                  "attention.query_key_value", "attention.dense", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h",
                  ("gpt_neox.embed_in.weight", "gpt_neox.final_layer_norm", "embed_out.weight"))


def _whole(w: Any, shape: tuple[int, ...]) -> Any:
    """`w` when it has the fused tensor's whole `shape` (a slice of a wider one would pass silently)."""
    if tuple(w.shape) != shape:
        raise ValueError(f"the fused tensor has the shape {tuple(w.shape)}, but the config implies {shape}")
    return w


def fused(cfg: DecoderConfig, names: FusedNames) -> WeightMap:
    """GPT-2 (Conv1D [in, out]; c_attn [d_model, 3 d_model]) or GPT-NeoX (Linear [out, in]; query_key_value
    [heads x (q, k, v) x d_head, d_model], fused per head)."""
    d, h, k = cfg.d_model, cfg.n_heads, cfg.d_head
    conv = names is GPT2
    if conv:
        qkv = lambda j: lambda w: _whole(w, (d, 3 * d))[:, j * d:(j + 1) * d].reshape(d, h, k)  # noqa: E731
        qkv_bias = lambda j: lambda w: _whole(w, (3 * d,))[j * d:(j + 1) * d].reshape(h, k)  # noqa: E731
    else:
        qkv = lambda j: lambda w: w.reshape(h, 3, k, d)[:, j].transpose(2, 0, 1)  # noqa: E731
        qkv_bias = lambda j: lambda w: w.reshape(h, 3, k)[:, j]  # noqa: E731
    dense = same if conv else (lambda w: w.T)
    out: WeightMap = {}
    if names.positions:
        out["pos_embed/embedding"] = (names.positions, same)
    for i in range(cfg.n_layers):
        p, b = names.layer.format(i=i), f"blocks/{i}"
        _norm(out, f"{b}/ln1", f"{p}.{names.ln1}", True)
        _norm(out, f"{b}/ln2", f"{p}.{names.ln2}", True)
        _fused(out, b, f"{p}.{names.qkv}", qkv, qkv_bias if cfg.qkv_bias else None)
        _linear(out, f"{b}/attn/out", f"{p}.{names.out}", shaped(h, k, d) if conv else linear_in(h, k), cfg.out_bias)
        _linear(out, f"{b}/mlp/fc_in", f"{p}.{names.fc_in}", dense, True)
        _linear(out, f"{b}/mlp/fc_out", f"{p}.{names.fc_out}", dense, True)
    return _embeddings(cfg, out, *names.head)


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
            _linear(out, f"{b}/attn/{ours}", f"{p}.self_attn.{theirs}", linear(heads, k), False)
            if cfg.qkv_bias:
                out[f"{b}/attn/{ours}/bias"] = (f"{p}.self_attn.{theirs}.bias", shaped(heads, k))
        _linear(out, f"{b}/attn/out", f"{p}.self_attn.o_proj", linear_in(h, k), cfg.out_bias)
        if cfg.qk_norm:
            _norm(out, f"{b}/attn/q_norm", f"{p}.self_attn.q_norm", False)
            _norm(out, f"{b}/attn/k_norm", f"{p}.self_attn.k_norm", False)
        for ours, theirs in (("gate", "gate_proj"), ("fc_in", "up_proj"), ("fc_out", "down_proj")):
            _linear(out, f"{b}/mlp/{ours}", f"{p}.mlp.{theirs}", lambda w: w.T, cfg.mlp_bias)
    return _embeddings(cfg, out, "model.embed_tokens.weight", "model.norm", "lm_head.weight")


_MAPS: dict[str, Callable[[DecoderConfig], WeightMap]] = {"gpt2": lambda cfg: fused(cfg, GPT2),
                                                          "gpt_neox": lambda cfg: fused(cfg, NEOX)}


def weight_map(cfg: DecoderConfig) -> WeightMap:
    """The weight map of a DecoderConfig's family."""
    if cfg.family in _MAPS:
        return _MAPS[cfg.family](cfg)
    if cfg.family in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3"):
        return llama_like(cfg)
    raise UsageError(f"no weight map for family {cfg.family!r}")
