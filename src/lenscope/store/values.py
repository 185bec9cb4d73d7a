"""Scalar values and JSON config: checked, encoded for SQL, decoded losslessly (S3). No pickle."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from lenscope.errors import UsageError

Scalar = float | int | str | bool | None

# Keys a node row already uses for its own columns; a value key may not shadow them.
RESERVED_KEYS = frozenset({"node", "name", "nonce", "seq", "status", "created", "checkpoint", "error"})
MAX_KEY = 200


def scalar(key: str, value: object) -> Scalar:
    """`value` as a plain Python scalar (0-d NumPy/JAX arrays unwrap); a UsageError otherwise."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return _in_range(key, value)
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", 0) == 0 and getattr(value, "size", 1) == 1:
        out = item()
        if out is None or isinstance(out, (bool, int, float, str)):
            return _in_range(key, out)
    raise UsageError(
        f"value {key!r} has type {type(value).__name__}; expected float, int, str, bool, None or a 0-d array"
    )


def _in_range(key: str, value: Scalar) -> Scalar:
    """An int that fits the store's 64-bit integers (and a float's range, for queries); a UsageError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        raise UsageError(f"value {key!r} is an integer of {value.bit_length()} bits: stored integers are 64-bit "
                         "(-2**63 to 2**63 - 1); record it as a float or a string")
    return value


def check_values(values: Mapping[str, object]) -> dict[str, Scalar]:
    """Checked copy of one record: string keys that shadow no column, scalar values."""
    if not isinstance(values, Mapping):
        raise UsageError(f"values must be a mapping of key -> scalar, got {type(values).__name__}")
    out: dict[str, Scalar] = {}
    for key, value in values.items():
        if not isinstance(key, str) or not key or len(key) > MAX_KEY or "\x00" in key:
            raise UsageError(f"value key {key!r} refused: expected a non-empty string of at most {MAX_KEY} characters")
        if key in RESERVED_KEYS:
            reserved = ", ".join(sorted(RESERVED_KEYS))
            raise UsageError(f"value key {key!r} is reserved for a node column; reserved: {reserved}")
        out[key] = scalar(key, value)
    return out


def encode(value: Scalar) -> tuple[str, float | None, str | None]:
    """(kind, num, txt) columns for one scalar; NaN keeps num NULL so it matches no comparison."""
    if value is None:
        return "n", None, None
    if isinstance(value, bool):
        return "b", float(value), "true" if value else "false"
    if isinstance(value, int):
        return "i", float(value), str(value)
    if isinstance(value, float):
        return "f", (None if math.isnan(value) else value), repr(value)
    return "s", None, value


def decode(kind: str, num: float | None, txt: str | None) -> Scalar:
    """The scalar stored as (kind, num, txt)."""
    if kind == "n":
        return None
    if kind == "b":
        return txt == "true"
    if kind == "i":
        return int(txt)
    if kind == "f":
        return float(txt)
    return txt


def dump_config(config: Mapping[str, Any] | None) -> str | None:
    """Config as strict JSON text (NaN refused); a UsageError naming what cannot be stored."""
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise UsageError(f"config must be a mapping (JSON object), got {type(config).__name__}")
    try:
        return json.dumps(config, allow_nan=False)
    except (TypeError, ValueError) as error:
        where = _unstorable(config)
        raise UsageError(f"config is not storable as JSON{f' at {where}' if where else ''}: {error}"
                         + ("; NaN and infinity have no JSON form: give a number" if "JSON compliant" in str(error)
                            else "")) from None


def _unstorable(config: Any, prefix: str = "") -> str | None:
    """The `/`-joined path of the first value of `config` that strict JSON cannot hold (NaN, inf, an object)."""
    items = config.items() if isinstance(config, Mapping) else enumerate(config) if isinstance(config, list) else ()
    for key, value in items:
        path = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, (Mapping, list)):
            found = _unstorable(value, path)
            if found:
                return found
        elif not (value is None or isinstance(value, (str, int, bool))
                  or (isinstance(value, float) and math.isfinite(value))):
            return path
    return None


def load_config(text: str | None) -> dict | None:
    """The config stored as JSON text, or None."""
    return None if text is None else json.loads(text)
