"""Models written per example (the idiomatic Equinox style), mapped over the batch so capture sees whole batches.

`per_example(model)(*inputs)` is `jax.vmap(model)(*inputs)`, and while it runs, the values capture records
(module inputs, recorded outputs) and the values patch functions receive are the whole batch [batch, ...],
not one example: a `jax.custom_batching.custom_vmap` tap hands them over from under the vmap (and from under
vmaps the model itself makes, e.g. over positions), so `analyze()` and `patch=` work as for batched models.
The captured layers stay per-example modules: call them as `jax.vmap(layer)(x)` on captured inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

from .jax_private import current_trace  # to tell the model's own vmaps from the one around it

__all__ = ["active", "per_example", "through", "whole"]

_OUTSIDE: ContextVar[Any] = ContextVar("lenscope_per_example", default=None)  # the trace around the example vmap


def per_example(fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn mapped over the leading axis of every argument (jax.vmap), with capture and patches seeing the batch."""
    def mapped(*args: Any) -> Any:
        token = _OUTSIDE.set(current_trace())
        try:
            return jax.vmap(fn)(*args)
        finally:
            _OUTSIDE.reset(token)

    return mapped


def _arrays(tree: Any) -> tuple[list[Any], Any, list[int]]:
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return leaves, treedef, [i for i, x in enumerate(leaves) if isinstance(x, (jax.Array, jax.core.Tracer))]


def _lift(values: list[Any], fn: Callable[[list[Any]], list[Any]]) -> list[Any] | None:
    """fn applied to `values` as seen outside every vmap between here and the example vmap (each a leading axis),
    returned as the values here; None when no vmap maps them (they are the same for every example).

    fn must keep the shapes (`custom_vmap` traces the unbatched function for its output types, which is
    the identity here: the work happens in the batching rule, on whole batches).
    """
    outside, ran = _OUTSIDE.get(), []

    @custom_vmap
    def tap(xs: list[Any]) -> list[Any]:
        return xs

    @tap.def_vmap
    def rule(axis_size: int, in_batched: list[list[bool]], xs: list[Any]) -> tuple[list[Any], list[bool]]:
        ran.append(True)
        batched = in_batched[0]  # one flag per leaf of the one argument, xs
        full = [x if b else jnp.broadcast_to(x, (axis_size, *jnp.shape(x))) for x, b in zip(xs, batched, strict=True)]
        here = current_trace()
        out = fn(full) if here is outside else _lift(full, fn)
        return (full if out is None else out), [True] * len(xs)

    out = tap(values)
    return out if ran else None


def whole(tree: Any) -> Any:
    """`tree` with each array as the whole batch [batch, ...] when under `per_example`; else `tree` itself."""
    if _OUTSIDE.get() is None:
        return tree
    leaves, treedef, index = _arrays(tree)
    if not index:
        return tree
    seen: list[Any] = []
    if _lift([leaves[i] for i in index], lambda xs: seen.append(xs) or xs) is None:
        return tree  # no vmap maps them: the same for every example, already whole
    for i, value in zip(index, seen[-1]):
        leaves[i] = value
    return jax.tree_util.tree_unflatten(treedef, leaves)


def active() -> bool:
    """Whether a `per_example` forward is running in this context."""
    return _OUTSIDE.get() is not None


def through(fn: Callable[[Any], Any], tree: Any) -> Any:
    """fn(tree), where under `per_example` fn receives and returns the whole batch (a patch function).

    Only the array leaves are mapped; other leaves (flags, names) reach fn as they are and must come back
    unchanged, so fn keeps the tree's structure (as a patch must).
    """
    if _OUTSIDE.get() is None:
        return fn(tree)
    leaves, treedef, index = _arrays(tree)
    if not index:
        return fn(tree)
    shape: list[Any] = []

    def apply(xs: list[Any]) -> list[Any]:
        full = list(leaves)
        for i, x in zip(index, xs):
            full[i] = x
        out_leaves, out_def, out_index = _arrays(fn(jax.tree_util.tree_unflatten(treedef, full)))
        shape[:] = [out_leaves, out_def, out_index]
        return [out_leaves[i] for i in out_index]

    mapped = _lift([leaves[i] for i in index], apply)
    if mapped is None:
        return fn(tree)  # nothing mapped: the values are the same for every example
    out_leaves, out_def, out_index = shape
    out_leaves = list(out_leaves)
    for i, x in zip(out_index, mapped):
        out_leaves[i] = x
    return jax.tree_util.tree_unflatten(out_def, out_leaves)
