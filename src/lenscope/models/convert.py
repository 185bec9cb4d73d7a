"""Move weights between the linen, NNX and Equinox reference models (same architecture, same leaf names).

Linen names list members `blocks_0`; NNX and Equinox use the list itself (`blocks/0`). Leaves are
matched by their path in that common form; a missing, extra or mis-shaped leaf is a UsageError
naming it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import equinox as eqx
import jax
import numpy as np
from flax import nnx

from ..errors import UsageError
from ..model_libraries import EQUINOX, NNX, library_of

__all__ = ["from_linen", "to_linen"]

_LIST_MEMBER = re.compile(r"^(.+)_(\d+)$")


def _linen_flat(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in params.items():
        member = _LIST_MEMBER.match(name)
        part = f"{member.group(1)}/{member.group(2)}" if member else name
        path = f"{prefix}{part}"
        out.update(_linen_flat(value, path + "/") if isinstance(value, Mapping) else {path: value})
    return out


def _linen_nested(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in flat.items():
        parts = path.split("/")
        names = []
        for part in parts:
            if part.isdigit() and names:
                names[-1] = f"{names[-1]}_{part}"
            else:
                names.append(part)
        node = out
        for name in names[:-1]:
            node = node.setdefault(name, {})
        node[names[-1]] = value
    return out


def _flat(model: Any) -> dict[str, Any]:
    """The floating-point parameters of an NNX or Equinox model by '/'-joined path."""
    library = library_of(model)
    if library == NNX:
        flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
        return {"/".join(map(str, path)): var.get_value() for path, var in flat}
    if library == EQUINOX:
        leaves, _ = jax.tree_util.tree_flatten_with_path(eqx.filter(model, eqx.is_inexact_array))
        return {jax.tree_util.keystr(path, simple=True, separator="/"): leaf for path, leaf in leaves}
    raise UsageError(f"expected a flax.nnx or equinox model, got {type(model).__module__}.{type(model).__qualname__}")


def _check(given: Mapping[str, Any], wanted: Mapping[str, Any]) -> None:
    missing = [p for p in wanted if p not in given]
    extra = [p for p in given if p not in wanted]
    wrong = [p for p in wanted if p in given and np.shape(given[p]) != np.shape(wanted[p])]
    if missing or extra or wrong:
        parts = [f"missing {missing[:5]}" if missing else "", f"extra {extra[:5]}" if extra else "",
                 f"shape differs at {wrong[:5]}" if wrong else ""]
        raise UsageError("the weights do not fit the model (same architecture and sizes?): "
                         + "; ".join(p for p in parts if p))


def to_linen(model: Any) -> dict[str, Any]:
    """The linen reference model's `params` for an NNX or Equinox reference model's weights."""
    return _linen_nested(_flat(model))


def from_linen(params: Mapping[str, Any], model: Any) -> Any:
    """`model` (NNX or Equinox) holding the linen `params`: an NNX model is updated in place and returned,
    an Equinox model is returned as a new module."""
    given, wanted = _linen_flat(params), _flat(model)
    _check(given, wanted)
    if library_of(model) == NNX:
        state = nnx.state(model, nnx.Param)
        for path, var in nnx.to_flat_state(state):
            var.set_value(jax.numpy.asarray(given["/".join(map(str, path))], var.get_value().dtype))
        nnx.update(model, state)
        return model
    leaves, treedef = jax.tree_util.tree_flatten_with_path(model)
    replaced = []
    for path, leaf in leaves:
        name = jax.tree_util.keystr(path, simple=True, separator="/")
        replaced.append(jax.numpy.asarray(given[name], leaf.dtype) if name in wanted else leaf)
    return jax.tree_util.tree_unflatten(treedef, replaced)
