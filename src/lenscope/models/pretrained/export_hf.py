"""A decoder as a Hugging Face folder (config.json, model.safetensors, tokenizer files) that `transformers` reads.

The weight maps say which checkpoint tensor fills each leaf through a NumPy gather (a transpose, reshape or slice).
Running a map's transform on an array of the tensor's element indices gives, for each leaf element, the index it
came from; writing the leaf back through those indices inverts the map exactly, for every family at once.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ...errors import UsageError
from ...files import staged_folder
from .config import DecoderConfig
from .decoder import Decoder
from .load import leaf_path
from .tokenizer import Tokenizer
from .weights import weight_map

__all__ = ["EXPORTABLE", "hf_state_dict", "save_hf_folder"]

EXPORTABLE = ("gpt2", "gpt_neox", "llama")  # families whose config.json lenscope writes and transformers reads back


def _leaves(model: Decoder) -> dict[str, np.ndarray]:
    """{leaf path: array} of the decoder's parameters, on the host."""
    flat = jax.tree_util.tree_flatten_with_path(model)[0]
    return {leaf_path(path): np.asarray(x) for path, x in flat if isinstance(x, jax.Array | np.ndarray)}


def _shape(name: str, parts: list[tuple[str, Any]], leaves: Mapping[str, np.ndarray], conv: bool) -> tuple:
    """The stored tensor's shape: an embedding as is, a vector flat, a kernel [*in, *out] as a torch Linear
    [out, in] (or GPT-2's Conv1D [in, out]), the parts of a fused projection side by side on `out`."""
    leaf, first = parts[0][0], leaves[parts[0][0]]
    size = sum(leaves[p].size for p, _ in parts)
    if leaf.endswith("/embedding"):
        return first.shape
    if not leaf.endswith("/kernel"):
        return (size,)
    ins = math.prod(first.shape[:2 if leaf.endswith("attn/out/kernel") else 1])
    return (ins, size // ins) if conv and not name.startswith("lm_head") else (size // ins, ins)


def hf_state_dict(model: Decoder, cfg: DecoderConfig) -> dict[str, np.ndarray]:
    """{tensor name: float32 array} of the family's checkpoint that `model` loads from (the weight map inverted)."""
    if cfg.family not in EXPORTABLE:
        raise UsageError(f"no Hugging Face export for family {cfg.family!r}; exportable: {', '.join(EXPORTABLE)}")
    leaves, groups = _leaves(model), {}
    for leaf, (name, transform) in weight_map(cfg).items():
        groups.setdefault(name, []).append((leaf, transform))
    out = {}
    for name, parts in groups.items():
        shape = _shape(name, parts, leaves, conv=cfg.family == "gpt2")
        index = np.arange(math.prod(shape)).reshape(shape)
        flat, seen = np.zeros(index.size, np.float32), np.zeros(index.size, np.int32)
        for leaf, transform in parts:
            where = np.asarray(transform(index))
            if where.shape != leaves[leaf].shape:
                raise ValueError(f"{name} {shape}: leaf {leaf} is {leaves[leaf].shape}, the map gives {where.shape}")
            flat[where.ravel()] = leaves[leaf].ravel()
            np.add.at(seen, where.ravel(), 1)
        if not (seen == 1).all():
            raise ValueError(f"{name}: the map does not fill each element once ({int((seen != 1).sum())} do not)")
        out[name] = flat.reshape(shape)
    return out


def _safetensors(tensors: Mapping[str, np.ndarray]) -> bytes:
    """The safetensors file of float32 tensors (header: a JSON table of offsets, padded to 8 bytes)."""
    table, offset, chunks = {"__metadata__": {"format": "pt"}}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, "<f4").tobytes()
        table[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        chunks.append(data)
    header = json.dumps(table, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + b"".join(chunks)


def _tokenizer_files(tokenizer: Tokenizer) -> dict[str, bytes]:
    """tokenizer.json and a tokenizer_config.json naming its special tokens (for AutoTokenizer)."""
    backend = tokenizer.backend
    special = {f"{key}_token": backend.id_to_token(i) for key, i in
               (("bos", tokenizer.bos_token_id), ("eos", tokenizer.eos_token_id), ("pad", tokenizer.pad_token_id))
               if i is not None}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 30, **special}
    return {"tokenizer.json": backend.to_str().encode(), "tokenizer_config.json": json.dumps(config, indent=1).encode()}


def save_hf_folder(model: Decoder, cfg: DecoderConfig, hf_config: Mapping[str, Any], folder: str | os.PathLike,
                   tokenizer: Tokenizer | None = None) -> Path:
    """Write `folder` (new or empty): config.json, model.safetensors and the tokenizer's files; all or nothing."""
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise UsageError(f"{folder} exists and is not an empty folder; give a new folder to export into")
    config = dict(hf_config)
    if cfg.family == "gpt2":  # GPT-2's own config.json carries n_ctx beside n_positions, and TransformerLens reads it
        config.setdefault("n_ctx", config["n_positions"])
    files = {"config.json": json.dumps(config, indent=1).encode(),
             "model.safetensors": _safetensors(hf_state_dict(model, cfg))}
    files |= _tokenizer_files(tokenizer) if tokenizer is not None else {}
    with staged_folder(folder, "the export folder") as staging:  # unique staging beside it, removed on failure
        staging.mkdir()
        for name, data in files.items():
            (staging / name).write_bytes(data)
    return folder
