"""Checks of a config.json before any decoder is built: every number the families read has its type and range,
the sizes divide as the architecture needs, and the token ids lie inside the vocabulary."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...errors import UsageError

__all__ = ["check_config", "check_token_ids"]

# (low, high) of the integer attributes; a config outside these is no model lenscope can load
INTS = {
    "vocab_size": (1, 1 << 22), "n_embd": (1, 1 << 16), "hidden_size": (1, 1 << 16), "n_layer": (1, 1024),
    "num_hidden_layers": (1, 1024), "n_head": (1, 1024), "num_attention_heads": (1, 1024),
    "num_key_value_heads": (1, 1024), "n_inner": (1, 1 << 20), "intermediate_size": (1, 1 << 20),
    "n_positions": (1, 1 << 24), "max_position_embeddings": (1, 1 << 24), "head_dim": (1, 1 << 12),
    "sliding_window": (1, 1 << 31), "query_pre_attn_scalar": (1, 1 << 16), "sliding_window_pattern": (1, 1024),
    "_sliding_window_pattern": (1, 1024), "max_window_layers": (0, 1024),
}
POSITIVE = ("layer_norm_epsilon", "layer_norm_eps", "rms_norm_eps", "rope_theta", "rope_local_base_freq",
            "rotary_emb_base", "attn_logit_softcapping", "final_logit_softcapping")
FRACTIONS = ("rotary_pct", "partial_rotary_factor")
BOOLS = ("tie_word_embeddings", "attention_bias", "mlp_bias", "use_parallel_residual", "scale_attn_weights",
         "use_sliding_window", "reorder_and_upcast_attn", "add_cross_attention", "scale_attn_by_inverse_layer_idx")
MAPPINGS = ("rope_scaling", "rope_parameters")
REQUIRED = {"gpt2": ("vocab_size", "n_embd", "n_layer", "n_head", "n_positions")}
LLAMA_LIKE = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_config(raw: Mapping[str, Any], family: str) -> None:
    """UsageError naming the first attribute of config.json with the wrong type, range or proportion."""
    for key in REQUIRED.get(family, LLAMA_LIKE):
        if raw.get(key) is None:
            raise UsageError(f"config.json lacks {key!r}, which {family} models need (an integer)")
    for key, (low, high) in INTS.items():
        value = raw.get(key)
        if value is not None and not (_is_int(value) and low <= value <= high):
            raise UsageError(f"config.json {key}={repr(value)[:40]}: expected an integer from {low} to {high}")
    for key in POSITIVE + FRACTIONS:
        value = raw.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0 \
                or (key in FRACTIONS and value > 1):
            bound = "a number in (0, 1]" if key in FRACTIONS else "a finite number > 0"
            raise UsageError(f"config.json {key}={repr(value)[:40]}: expected {bound}")
    for key in BOOLS:
        if raw.get(key) is not None and not isinstance(raw[key], bool):
            raise UsageError(f"config.json {key}={repr(raw[key])[:40]}: expected true or false")
    for key in MAPPINGS:
        if raw.get(key) is not None and not isinstance(raw[key], Mapping):
            raise UsageError(f"config.json {key}={repr(raw[key])[:40]}: expected an object (or null)")
    _check_proportions(raw, family)
    check_token_ids({k: raw.get(k) for k in TOKEN_IDS}, raw["vocab_size"], "config.json")


def _check_proportions(raw: Mapping[str, Any], family: str) -> None:
    width, heads = (raw["n_embd"], raw["n_head"]) if family == "gpt2" else (raw["hidden_size"],
                                                                           raw["num_attention_heads"])
    if raw.get("head_dim") is None and width % heads:
        raise UsageError(f"config.json: the width {width} is not a multiple of the {heads} attention heads")
    kv = raw.get("num_key_value_heads")
    if kv is not None and heads % kv:
        raise UsageError(f"config.json num_key_value_heads={kv} does not divide num_attention_heads={heads}")


def check_token_ids(ids: Mapping[str, Any], vocab: int, source: str) -> None:
    """UsageError for a token id (or a list of them, as Llama 3 gives eos) outside [0, vocab)."""
    for key, value in ids.items():
        values = value if isinstance(value, list) else [value]
        for v in values:
            if v is not None and not (_is_int(v) and 0 <= v < vocab):
                raise UsageError(f"{source} {key}={repr(value)[:40]}: expected a token id from 0 to {vocab - 1} "
                                 f"(the vocabulary has {vocab} tokens)")
