"""What analyze() may return (A6): a PyTree of numeric arrays, numeric scalars or None."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from ..errors import UsageError
from .inputs import DebugInputs

__all__ = ["is_numeric", "validate_result"]

_SCALARS = (bool, int, float, complex, np.bool_, np.number)


def is_numeric(dtype: Any) -> bool:
    """True for bool and number dtypes, including ml_dtypes (bfloat16 & co report numpy kind 'V')."""
    return jax.dtypes.issubdtype(dtype, np.bool_) or jax.dtypes.issubdtype(dtype, np.number)


def _is_leaf(x: Any) -> bool:
    # DebugInputs is a pytree (so it may cross jit); as a result it is a mistake, so treat it as one opaque leaf.
    return isinstance(x, DebugInputs)


def _bad_leaf(leaf: Any) -> str | None:
    """Why `leaf` is not a valid analysis result leaf, or None when it is."""
    if leaf is None or isinstance(leaf, _SCALARS):
        return None
    if isinstance(leaf, (jax.Array, np.ndarray)):
        return None if is_numeric(leaf.dtype) else f"an array of dtype {leaf.dtype}"
    kind = type(leaf)
    return f"a {kind.__qualname__}" if kind.__module__ == "builtins" else f"a {kind.__module__}.{kind.__qualname__}"


def validate_result(tree: Any) -> None:
    """Check analyze()'s PyTree holds only arrays, numeric scalars or None; UsageError names the bad leaf."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_leaf)
    for path, leaf in leaves:
        why = _bad_leaf(leaf)
        if why is not None:
            where = jax.tree_util.keystr(path) or "(the whole result)"
            raise UsageError(
                f"analyze() result leaf {where} is {why}; results must be a PyTree of arrays, "
                "bool/int/float/complex scalars or None (crop/reduce to arrays; keep names in dict keys)"
            )
