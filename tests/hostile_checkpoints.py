"""A tiny GPT-2 checkpoint written by hand with NumPy (vocabulary 40, width 8, one layer), and hostile variants of
it: damaged safetensors headers, shard names leaving the folder, and config.json values of the wrong type or range.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

VOCAB, D, POSITIONS = 40, 8, 16
CONFIG = {"model_type": "gpt2", "vocab_size": VOCAB, "n_embd": D, "n_layer": 1, "n_head": 2, "n_positions": POSITIONS,
          "bos_token_id": 1, "eos_token_id": 2}


def gpt2_tensors(vocab: int = VOCAB, width: int = D) -> dict[str, np.ndarray]:
    """The tensors of a one-layer GPT-2 (tied unembedding), small random values."""
    rng = np.random.default_rng(0)
    shapes = {"transformer.wte.weight": (vocab, D), "transformer.wpe.weight": (POSITIONS, D),
              "transformer.h.0.ln_1.weight": (D,), "transformer.h.0.ln_1.bias": (D,),
              "transformer.h.0.attn.c_attn.weight": (D, 3 * width), "transformer.h.0.attn.c_attn.bias": (3 * D,),
              "transformer.h.0.attn.c_proj.weight": (D, D), "transformer.h.0.attn.c_proj.bias": (D,),
              "transformer.h.0.ln_2.weight": (D,), "transformer.h.0.ln_2.bias": (D,),
              "transformer.h.0.mlp.c_fc.weight": (D, 4 * D), "transformer.h.0.mlp.c_fc.bias": (4 * D,),
              "transformer.h.0.mlp.c_proj.weight": (4 * D, D), "transformer.h.0.mlp.c_proj.bias": (D,),
              "transformer.ln_f.weight": (D,), "transformer.ln_f.bias": (D,)}
    return {k: (rng.normal(0, 0.02, s) + (k.endswith("ln_1.weight") or k.endswith("ln_2.weight")
                                          or k.endswith("ln_f.weight"))).astype(np.float32) for k, s in shapes.items()}


def safetensors_bytes(tensors: dict[str, np.ndarray], edit: Callable[[dict], object] | None = None) -> bytes:
    """A safetensors file: 8-byte header length, the JSON table (after `edit(table)`, which may return a
    replacement), the raw bytes."""
    table, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        blob = np.ascontiguousarray(array).tobytes()
        table[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    if edit is not None:
        table = edit(table) or table
    header = json.dumps(table).encode()
    return struct.pack("<Q", len(header)) + header + b"".join(blobs)


def checkpoint(folder: Path, config: dict | None = None, weights: bytes | None = None) -> Path:
    """A checkpoint folder: config.json (CONFIG, or `config`) and model.safetensors (the good one, or `weights`)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIG if config is None else config))
    (folder / "model.safetensors").write_bytes(safetensors_bytes(gpt2_tensors()) if weights is None else weights)
    return folder


def entry(name: str, **changes: object) -> Callable[[dict], None]:
    """An edit setting fields of one tensor entry."""
    return lambda table: table[name].update(changes)


WTE = "transformer.wte.weight"
GOOD = safetensors_bytes(gpt2_tensors())
HEADER_LENGTH = len(GOOD) - sum(a.nbytes for a in gpt2_tensors().values()) - 8
# name -> (model.safetensors bytes, what the error says)
BAD_WEIGHTS = {
    "header length 2**64-1": (struct.pack("<Q", 2**64 - 1) + GOOD[8:], "header length 18446744073709551615"),
    "header length 10**12": (struct.pack("<Q", 10**12) + GOOD[8:], "exceeds the file"),
    "header a list": (safetensors_bytes(gpt2_tensors(), lambda t: list(t)), "header is a JSON list"),
    "header a string": (safetensors_bytes(gpt2_tensors(), lambda t: "tensors"), "header is a JSON str"),
    "entry a number": (safetensors_bytes(gpt2_tensors(), lambda t: t.update({WTE: 7})), f"tensor '{WTE}' is '7'"),
    "no dtype": (safetensors_bytes(gpt2_tensors(), lambda t: t[WTE].pop("dtype") and None),
                 "expected an object of dtype"),
    "no data_offsets": (safetensors_bytes(gpt2_tensors(), lambda t: t[WTE].pop("data_offsets") and None),
                        "expected an object of dtype, shape and data_offsets"),
    "unknown dtype": (safetensors_bytes(gpt2_tensors(), entry(WTE, dtype="F128")), "dtype 'F128'; readable"),
    "dtype a list": (safetensors_bytes(gpt2_tensors(), entry(WTE, dtype=["F32"])), "dtype \"['F32']\"; readable"),
    "negative offsets": (safetensors_bytes(gpt2_tensors(), entry(WTE, data_offsets=[-1280, 0])),
                         "data_offsets [-1280, 0]"),
    "offsets past the end": (safetensors_bytes(gpt2_tensors(), entry(WTE, data_offsets=[0, 10**9])),
                             "0 <= begin <= end <="),
    "reversed offsets": (safetensors_bytes(gpt2_tensors(), entry(WTE, data_offsets=[1280, 0])),
                         "data_offsets [1280, 0]"),
    "truncated": (GOOD[:-100], "data_offsets"),
    "shape larger than the data": (safetensors_bytes(gpt2_tensors(), entry(WTE, shape=[41, 8])),
                                   "spans 1280 bytes, but its shape [41, 8] of F32 needs 1312"),
    "negative shape": (safetensors_bytes(gpt2_tensors(), entry(WTE, shape=[-40, -8])), "non-negative integers"),
    "overlapping": (safetensors_bytes(gpt2_tensors(), lambda t: t["transformer.wpe.weight"].update(
        data_offsets=[0, 512])), "overlap"),
}
BAD_CONFIGS = {
    "n_layer -1": ({**CONFIG, "n_layer": -1}, "n_layer=-1: expected an integer from 1 to 1024"),
    "n_layer 10**9": ({**CONFIG, "n_layer": 10**9}, "n_layer=1000000000"),
    "n_head 0": ({**CONFIG, "n_head": 0}, "n_head=0"),
    "n_embd NaN": ({**CONFIG, "n_embd": float("nan")}, "n_embd=nan"),
    "n_embd 8.5": ({**CONFIG, "n_embd": 8.5}, "n_embd=8.5"),
    "n_embd 10**18": ({**CONFIG, "n_embd": 10**18}, "n_embd=1000000000000000000"),
    "vocab_size text": ({**CONFIG, "vocab_size": "40"}, "vocab_size='40'"),
    "n_embd missing": ({k: v for k, v in CONFIG.items() if k != "n_embd"}, "lacks 'n_embd'"),
    "epsilon text": ({**CONFIG, "layer_norm_epsilon": "tiny"}, "layer_norm_epsilon='tiny': expected a finite"),
    "a list": ([CONFIG], "config.json is a JSON list"),
    "width not a multiple of heads": ({**CONFIG, "n_head": 3}, "not a multiple of the 3 attention heads"),
    "eos beyond the vocabulary": ({**CONFIG, "eos_token_id": 10**6}, "eos_token_id=1000000: expected a token id"),
    "rope_scaling yes": ({**CONFIG, "model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1,
                          "num_attention_heads": 2, "intermediate_size": 16, "rope_scaling": "yes"},
                         "rope_scaling='yes': expected an object"),
}
