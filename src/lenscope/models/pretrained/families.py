"""The per-family config maps: a config.json (as a dict) -> DecoderConfig, refusing what they do not handle.

Each family lists the attributes it reads and the ones that cannot change the computation (ids, dropout,
initialization); any other attribute, or a handled one with a value the decoder cannot honour, is refused by name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import UsageError
from .config import DecoderConfig
from .config_checks import check_config
from .rope import inverse_frequencies, rope_settings

__all__ = ["FAMILIES", "decoder_config"]

Raw = Mapping[str, Any]

# Attributes that never change a forward pass in evaluation: metadata, token ids, dropout, initialization.
HARMLESS = frozenset({
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "_name_or_path",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "use_cache",
    "initializer_range", "id2label", "label2id", "task_specific_params", "return_dict", "output_attentions",
    "output_hidden_states", "torchscript", "problem_type", "tokenizer_class", "finetuning_task", "is_decoder",
    "attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop", "classifier_dropout",
    "summary_activation", "summary_first_dropout", "summary_proj_to_labels", "summary_type", "summary_use_proj",
    "max_position_embeddings", "pretraining_tp", "_attn_implementation_autoset", "n_ctx", "gradient_checkpointing",
    "tie_word_embeddings", "rope_parameters", "rope_theta", "rope_scaling", "head_dim", "layer_types",
    "num_key_value_heads", "use_bidirectional_attention", "chunk_size_feed_forward", "prefix", "pruned_heads",
    "max_window_layers", "use_sliding_window", "sliding_window", "_sliding_window_pattern", "sliding_window_pattern",
})

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
               "silu": "silu", "swish": "silu", "relu": "relu"}


def _activation(raw: Raw, key: str, default: str) -> str:
    name = raw.get(key) or default
    if name not in ACTIVATIONS:
        raise UsageError(f"config.json {key}={name!r} is not supported; supported: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def _refuse(raw: Raw, family: str, known: set[str], must: Mapping[str, Any]) -> None:
    """UsageError naming the first attribute the family does not handle, or a value it cannot honour."""
    for key in raw:
        if key not in known and key not in HARMLESS:
            raise UsageError(f"config.json attribute {key!r} ({raw[key]!r}) is not handled for {family} models and may "
                             f"change the computation; lenscope refuses it rather than ignore it. Handled: "
                             f"{', '.join(sorted(known))}")
    for key, allowed in must.items():
        if key in raw and raw[key] not in allowed:
            raise UsageError(f"config.json {key}={raw[key]!r} is not supported for {family} models; supported: "
                             f"{', '.join(map(repr, allowed))}")


def _rope(raw: Raw, d_head: int, n_layers: int, partial: float = 1.0, types: list[str] | None = None,
          **spelling: Any) -> tuple[tuple[tuple[float, ...], ...], int]:
    dim = int(d_head * float(rope_settings(raw, **spelling).get("partial_rotary_factor", partial)))
    freqs = [inverse_frequencies(rope_settings(raw, layer_type=types[i] if types else None, **spelling), dim,
                                 raw.get("max_position_embeddings")) for i in range(n_layers)]
    return tuple(freqs), dim


def _layer_types(raw: Raw, n_layers: int, sliding: Callable[[int], bool]) -> list[str]:
    types = raw.get("layer_types")
    if types is None:
        types = ["sliding_attention" if sliding(i) else "full_attention" for i in range(n_layers)]
    bad = [t for t in types if t not in ("sliding_attention", "full_attention")]
    if bad or len(types) != n_layers:
        raise UsageError(f"config.json layer_types {types!r}: expected {n_layers} entries of 'sliding_attention' or "
                         "'full_attention'")
    return list(types)


def _windows(raw: Raw, types: list[str]) -> tuple[int | None, ...] | None:
    window = raw.get("sliding_window")
    if window is None or "sliding_attention" not in types:
        return None
    return tuple(int(window) if t == "sliding_attention" else None for t in types)


def gpt2(raw: Raw) -> DecoderConfig:
    """GPT-2: learned positions, LayerNorm, GELU MLP, fused c_attn, tied unembedding."""
    _refuse(raw, "gpt2", {"vocab_size", "n_embd", "n_layer", "n_head", "n_inner", "n_positions",
                          "activation_function", "layer_norm_epsilon", "scale_attn_weights",
                          "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"},
            {"scale_attn_by_inverse_layer_idx": (False,), "add_cross_attention": (False,)})
    d, heads = raw["n_embd"], raw["n_head"]
    return DecoderConfig(
        family="gpt2", vocab_size=raw["vocab_size"], d_model=d, n_layers=raw["n_layer"], n_heads=heads,
        n_kv_heads=heads, d_head=d // heads, d_mlp=raw.get("n_inner") or 4 * d, norm="layernorm",
        norm_eps=raw.get("layer_norm_epsilon", 1e-5), n_positions=raw["n_positions"], gated=False,
        activation=_activation(raw, "activation_function", "gelu_new"), qkv_bias=True, out_bias=True, mlp_bias=True,
        attn_scale=1 / math.sqrt(d // heads) if raw.get("scale_attn_weights", True) else 1.0,
        tied=raw.get("tie_word_embeddings", True))


def gpt_neox(raw: Raw) -> DecoderConfig:
    """GPT-NeoX (Pythia): partial rotary, parallel attention and MLP, fused per-head query_key_value."""
    _refuse(raw, "gpt_neox", {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                              "intermediate_size", "hidden_act", "layer_norm_eps", "use_parallel_residual",
                              "rotary_pct", "rotary_emb_base", "attention_bias"}, {})
    d, heads = raw["hidden_size"], raw["num_attention_heads"]
    freqs, dim = _rope(raw, d // heads, raw["num_hidden_layers"], raw.get("rotary_pct", 0.25),
                       theta_key="rotary_emb_base")
    bias = raw.get("attention_bias", True)
    return DecoderConfig(
        family="gpt_neox", vocab_size=raw["vocab_size"], d_model=d, n_layers=raw["num_hidden_layers"], n_heads=heads,
        n_kv_heads=heads, d_head=d // heads, d_mlp=raw["intermediate_size"], norm="layernorm",
        norm_eps=raw.get("layer_norm_eps", 1e-5), rope_freqs=freqs, rope_dim=dim,
        parallel=raw.get("use_parallel_residual", True), gated=False, activation=_activation(raw, "hidden_act", "gelu"),
        qkv_bias=bias, out_bias=bias, mlp_bias=True, attn_scale=1 / math.sqrt(d // heads),
        tied=raw.get("tie_word_embeddings", False))


LLAMA_KEYS = {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "intermediate_size", "hidden_act", "rms_norm_eps", "head_dim", "attention_bias", "mlp_bias"}


def _llama_like(raw: Raw, family: str, extra: set[str], *, windows: tuple[int | None, ...] | None = None,
                types: list[str] | None = None, **options: Any) -> DecoderConfig:
    _refuse(raw, family, LLAMA_KEYS | extra, {})
    d, heads = raw["hidden_size"], raw["num_attention_heads"]
    d_head = raw.get("head_dim") or d // heads
    layers = raw["num_hidden_layers"]
    freqs, dim = _rope(raw, d_head, layers, types=types)
    bias = bool(raw.get("attention_bias", False))
    fields: dict[str, Any] = dict(
        family=family, vocab_size=raw["vocab_size"], d_model=d, n_layers=layers, n_heads=heads,
        n_kv_heads=raw.get("num_key_value_heads") or heads, d_head=d_head, d_mlp=raw["intermediate_size"],
        norm="rmsnorm", norm_eps=raw.get("rms_norm_eps", 1e-6), rope_freqs=freqs, rope_dim=dim, gated=True,
        activation=_activation(raw, "hidden_act", "silu"), qkv_bias=bias, out_bias=bias,
        mlp_bias=bool(raw.get("mlp_bias", False)), attn_scale=d_head ** -0.5, windows=windows,
        tied=raw.get("tie_word_embeddings", False))
    fields.update(options)
    return DecoderConfig(**fields)


def llama(raw: Raw) -> DecoderConfig:
    """Llama 2 and 3 (grouped key/value heads, Llama-3 rope scaling)."""
    return _llama_like(raw, "llama", set())


def mistral(raw: Raw) -> DecoderConfig:
    """Mistral: Llama with a sliding window on every layer."""
    window = raw.get("sliding_window")
    layers = raw["num_hidden_layers"]
    return _llama_like(raw, "mistral", set(), windows=None if window is None else (int(window),) * layers)


def qwen2(raw: Raw) -> DecoderConfig:
    """Qwen 2: Llama with query/key/value biases (and sliding windows on the layers past max_window_layers)."""
    layers = raw["num_hidden_layers"]
    use = raw.get("use_sliding_window", False) and raw.get("sliding_window") is not None
    types = _layer_types(raw, layers, lambda i: use and i >= raw.get("max_window_layers", 28))
    return _llama_like(raw, "qwen2", set(), windows=_windows(raw, types) if use else None, qkv_bias=True,
                       out_bias=False)


def qwen3(raw: Raw) -> DecoderConfig:
    """Qwen 3: Llama with RMSNorm over each head's queries and keys."""
    layers = raw["num_hidden_layers"]
    use = raw.get("use_sliding_window", False) and raw.get("sliding_window") is not None
    types = _layer_types(raw, layers, lambda i: use and i >= raw.get("max_window_layers", 28))
    return _llama_like(raw, "qwen3", set(), windows=_windows(raw, types) if use else None, qk_norm=True)


def gemma(raw: Raw) -> DecoderConfig:
    """Gemma: (1 + weight) RMSNorm, embeddings times sqrt(d_model), GELU-tanh gated MLP, tied unembedding."""
    return _llama_like(raw, "gemma", {"hidden_activation"}, norm_offset=True, embed_scale=raw["hidden_size"] ** 0.5,
                       activation=_activation(raw, "hidden_activation" if raw.get("hidden_activation") else
                                              "hidden_act", "gelu_pytorch_tanh"),
                       tied=raw.get("tie_word_embeddings", True))


def gemma2(raw: Raw) -> DecoderConfig:
    """Gemma 2: Gemma with pre and post norms, attention and final soft-caps, alternating local/global layers."""
    layers = raw["num_hidden_layers"]
    types = _layer_types(raw, layers, lambda i: (i + 1) % 2 == 1)
    cfg = gemma({k: v for k, v in raw.items() if k not in GEMMA2_KEYS})
    _refuse(raw, "gemma2", LLAMA_KEYS | {"hidden_activation"} | GEMMA2_KEYS, {})
    return cfg.replace(family="gemma2", post_norms=True, attn_scale=raw.get("query_pre_attn_scalar", 256) ** -0.5,
                       attn_softcap=raw.get("attn_logit_softcapping"), final_softcap=raw.get("final_logit_softcapping"),
                       windows=_windows(raw, types))


GEMMA2_KEYS = {"query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping", "cache_implementation"}


def gemma3(raw: Raw) -> DecoderConfig:
    """Gemma 3 (text): Gemma 2's layout with q/k norms and separate rotary bases for local and global layers."""
    layers = raw["num_hidden_layers"]
    pattern = raw.get("sliding_window_pattern", raw.get("_sliding_window_pattern", 6))
    types = _layer_types(raw, layers, lambda i: (i + 1) % pattern != 0)
    extra = {"rope_local_base_freq"}
    base = gemma2({k: v for k, v in raw.items() if k not in extra | {"layer_types"}} | {"layer_types": types})
    if "rope_local_base_freq" in raw and not isinstance(raw.get("rope_parameters"), Mapping):
        local = {"rope_theta": raw["rope_local_base_freq"], "rope_type": "default"}
        spelled = {"rope_parameters": {"sliding_attention": local,
                                       "full_attention": rope_settings(raw, default_theta=1_000_000.0)}}
        freqs, _ = _rope(spelled, base.d_head, layers, types=types)
    else:
        freqs, _ = _rope(raw, base.d_head, layers, types=types)
    return base.replace(family="gemma3", qk_norm=True, rope_freqs=freqs)


FAMILIES: dict[str, Callable[[Raw], DecoderConfig]] = {
    "gpt2": gpt2, "gpt_neox": gpt_neox, "llama": llama, "mistral": mistral, "qwen2": qwen2, "qwen3": qwen3,
    "gemma": gemma, "gemma2": gemma2, "gemma3_text": gemma3,
}


def decoder_config(raw: Raw) -> DecoderConfig:
    """The DecoderConfig of a config.json; UsageError naming an unsupported model_type or attribute."""
    if not isinstance(raw, Mapping):
        raise UsageError(f"config.json is a JSON {type(raw).__name__}: expected an object of attributes")
    kind = raw.get("model_type")
    if not isinstance(kind, str) or kind not in FAMILIES:
        raise UsageError(f"config.json model_type {str(kind)[:40]!r} is not supported; supported: "
                         f"{', '.join(FAMILIES)}")
    check_config(raw, kind)
    return FAMILIES[kind](raw)
