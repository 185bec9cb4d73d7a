"""Checks of a SAELens folder before a Dictionary is made of it: cfg.json's sizes are integers in range and its
settings strings or booleans, the weights file a readable safetensors file, and the weights the architecture's
tensors, of float dtype, finite, with the shapes cfg.json implies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError
from ..files import read_json_object
from .core import Spec

MAX_SIZE = 1 << 24  # d_in, d_sae, d_out
TEXTS = ("architecture", "normalize_activations", "reshape_activations")  # settings cfg.json gives as strings
FLAGS = ("apply_b_dec_to_input", "rescale_acts_by_decoder_norm")  # and as booleans
KNOWN = ("W_enc", "b_enc", "W_dec", "b_dec", "threshold", "log_threshold", "W_skip", "b_gate", "b_mag", "r_mag")


def read_cfg(path: Path) -> dict[str, Any]:
    """cfg.json as a dict, its sizes checked; UsageError naming the file and the field otherwise."""
    cfg = read_json_object(path)
    for key in TEXTS:
        if key in cfg and not isinstance(cfg[key], str):
            raise UsageError(f"{path} {key}={str(cfg[key])[:80]}: expected a string (e.g. \"standard\")")
    for key in FLAGS:
        if key in cfg and not isinstance(cfg[key], bool):
            raise UsageError(f"{path} {key}={str(cfg[key])[:80]}: expected true or false")
    transcoder = "transcoder" in str(cfg.get("architecture", ""))
    for key in ("d_in", "d_sae", *(("d_out",) if transcoder else ())):
        value = cfg.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
            raise UsageError(f"{path} {key}={value!r}: expected an integer from 1 to {MAX_SIZE}")
    k = cfg.get("k", 1)
    if cfg.get("architecture") == "topk" and (isinstance(k, bool) or not isinstance(k, int)
                                               or not 1 <= k <= cfg["d_sae"]):
        raise UsageError(f"{path} k={k!r}: expected an integer from 1 to d_sae={cfg['d_sae']}")
    return cfg


def read_weights(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file; a UsageError naming the file for one safetensors cannot read (a garbage
    or oversized header, data past the file's end)."""
    from safetensors.numpy import load_file  # lazy: safetensors is needed only to read or write these files

    try:
        return load_file(path)
    except Exception as err:  # noqa: BLE001 - safetensors' SafetensorError and OSError: the file is at fault
        raise UsageError(f"{path} is not a readable safetensors file ({type(err).__name__}: {str(err)[:200]}); "
                         "expected SAELens' sae_weights.safetensors") from None


def check_tensors(path: Path, spec: Spec, tensors: dict[str, np.ndarray], arch: str) -> None:
    """UsageError for an unknown or missing tensor, a non-float dtype, a non-finite value or a shape other than
    cfg.json implies (names as stored: W_skip [d_out, d_in], log_threshold for a threshold)."""
    extra = sorted(set(tensors) - set(KNOWN))
    if extra:
        raise UsageError(f"{path} holds tensors a SAELens {arch} dictionary has no place for: {', '.join(extra)}; "
                         f"known: {', '.join(KNOWN)}")
    if spec.architecture == "jumprelu" and not {"threshold", "log_threshold"} & set(tensors):
        raise UsageError(f"{path}: a jumprelu dictionary needs a threshold (or log_threshold) tensor")
    d_out = spec.d_out or spec.d_in
    expected = {"W_enc": (spec.d_in, spec.d_sae), "b_enc": (spec.d_sae,), "b_gate": (spec.d_sae,),
                "W_dec": (spec.d_sae, d_out), "b_dec": (d_out,), "threshold": (spec.d_sae,),
                "log_threshold": (spec.d_sae,), "W_skip": (d_out, spec.d_in), "b_mag": (spec.d_sae,),
                "r_mag": (spec.d_sae,)}
    for name, array in tensors.items():
        if array.dtype.kind != "f" and array.dtype.name != "bfloat16":
            raise UsageError(f"{path} tensor {name!r} has dtype {array.dtype}: expected floating point")
        if tuple(array.shape) != expected[name]:
            raise UsageError(f"{path} tensor {name!r} has the shape {tuple(array.shape)}, but cfg.json "
                             f"(d_in={spec.d_in}, d_sae={spec.d_sae}) implies {expected[name]}")
        if not np.isfinite(np.asarray(array, np.float32)).all():
            raise UsageError(f"{path} tensor {name!r} holds NaN or infinite values")
