"""plot()'s JSON values as strict, stable bytes (A7): NaN, complex and non-str keys are errors naming the place."""

from __future__ import annotations

import json
import math
from typing import Any

import jax
import numpy as np

from ..capture.results import is_numeric
from ..errors import UsageError


def _jsonable(value: Any, path: str) -> Any:
    """Plain-Python copy of `value` for json, rejecting what strict JSON cannot hold."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if not math.isfinite(number):
            raise UsageError(
                f"plot() returned {number} at {path or '(top level)'}; JSON results must be finite "
                "(replace NaN/inf with None or drop the entry)"
            )
        return number
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise UsageError(
                    f"plot() returned a dict key {key!r} ({type(key).__name__}) at {path or '(top level)'}; "
                    "JSON object keys must be str"
                )
            out[key] = _jsonable(item, f"{path}[{key!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [_jsonable(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, jax.core.Tracer):
        raise UsageError(f"plot() returned a traced value at {path or '(top level)'}; return concrete data")
    if isinstance(value, (np.ndarray, jax.Array)):
        array = np.asarray(value)
        if not is_numeric(array.dtype):
            raise UsageError(f"plot() returned an array of dtype {array.dtype} at {path or '(top level)'}")
        if jax.dtypes.issubdtype(array.dtype, np.complexfloating):
            raise UsageError(f"plot() returned a complex array at {path or '(top level)'}; JSON has no complex")
        if array.dtype.kind == "V":  # ml_dtypes (bfloat16, int4, ...): widen so tolist() gives Python numbers
            array = array.astype(np.float64 if jax.dtypes.issubdtype(array.dtype, np.inexact) else np.int64)
        return _jsonable(array.tolist(), path)
    raise UsageError(
        f"plot() returned a {type(value).__qualname__} at {path or '(top level)'}; a JSON result may hold "
        "dict (str keys), list, tuple, str, bool, int, float, None and numpy scalars/arrays"
    )


def to_json_bytes(value: Any) -> bytes:
    """Strict, stable JSON bytes of a plot() result: sorted keys, 2-space indent, trailing newline."""
    plain = _jsonable(value, "")
    text = json.dumps(plain, sort_keys=True, indent=2, allow_nan=False, ensure_ascii=False)
    return (text + "\n").encode("utf-8")
