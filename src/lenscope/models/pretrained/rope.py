"""Rotary inverse frequencies from a config.json's rope settings: default, linear and Llama-3 scaling.

Computed in float32 as `transformers` does, so rotated queries and keys match it to the last bit that matters.
Both spellings are read: `rope_parameters` (transformers 5) and `rope_theta` + `rope_scaling` (older files).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import UsageError

__all__ = ["ROPE_TYPES", "inverse_frequencies", "rope_settings"]

ROPE_TYPES = ("default", "linear", "llama3")


def rope_settings(raw: Mapping[str, Any], *, theta_key: str = "rope_theta", default_theta: float = 10000.0,
                  layer_type: str | None = None) -> dict[str, Any]:
    """The rope settings of a config (or of one layer type's entry in `rope_parameters`), old or new spelling."""
    params = raw.get("rope_parameters")
    if isinstance(params, Mapping) and layer_type is not None and layer_type in params:
        params = params[layer_type]
    if isinstance(params, Mapping) and params:
        settings = dict(params)
    else:
        settings = dict(raw.get("rope_scaling") or {})
        settings.setdefault("rope_theta", raw.get(theta_key, default_theta))
    if "type" in settings and "rope_type" not in settings:
        settings["rope_type"] = settings.pop("type")
    settings.setdefault("rope_type", "default")
    settings.setdefault("rope_theta", raw.get(theta_key, default_theta))
    return settings


def inverse_frequencies(settings: Mapping[str, Any], dim: int, max_positions: int | None = None
                        ) -> tuple[float, ...]:
    """The dim/2 inverse frequencies of a rotary embedding over `dim` dims; UsageError for an unhandled rope_type."""
    kind = settings.get("rope_type", "default")
    if kind not in ROPE_TYPES:
        raise UsageError(f"config.json rope_type {kind!r} is not supported (it changes the positional encoding); "
                         f"supported: {', '.join(ROPE_TYPES)}")
    base = np.float32(settings["rope_theta"])
    inv = (np.float32(1.0) / base ** (np.arange(0, dim, 2).astype(np.float32) / np.float32(dim))).astype(np.float32)
    if kind == "linear":
        inv = inv / np.float32(settings["factor"])
    elif kind == "llama3":
        inv = _llama3(inv, settings, max_positions)
    return tuple(float(f) for f in inv.astype(np.float32))


def _llama3(inv: np.ndarray, s: Mapping[str, Any], max_positions: int | None) -> np.ndarray:
    """Llama 3.1's scaling: long wavelengths divided by `factor`, a smooth blend in between."""
    factor, low, high = (np.float32(s[k]) for k in ("factor", "low_freq_factor", "high_freq_factor"))
    old = np.float32(s.get("original_max_position_embeddings", max_positions))
    low_wave, high_wave = old / low, old / high
    wave = np.float32(2 * math.pi) / inv
    scaled = np.where(wave > low_wave, inv / factor, inv).astype(np.float32)
    smooth = ((old / wave - low) / (high - low)).astype(np.float32)
    blended = ((1 - smooth) * scaled / factor + smooth * scaled).astype(np.float32)
    medium = ~(wave < high_wave) & ~(wave > low_wave)
    return np.where(medium, blended, scaled).astype(np.float32)
