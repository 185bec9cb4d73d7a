"""Arrays by path as nested dicts of plain arrays: what a TrainState holds for NNX and Equinox models.

Typed PRNG keys (NNX RNG streams) are stored as their key data, so checkpoints and placement see
ordinary uint32 arrays, and are wrapped again from the definition's key when bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["nest", "restore", "store", "take"]


def store(value: Any) -> Any:
    """A leaf as the state keeps it: a typed PRNG key becomes its key data."""
    if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(value)
    return value


def restore(value: Any, like: Any) -> Any:
    """A stored leaf as the model holds it, `like` the definition's leaf (a typed key is wrapped again)."""
    if isinstance(like, jax.Array) and jax.dtypes.issubdtype(like.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(value, impl=jax.random.key_impl(like))
    return value


def nest(items: Iterable[tuple[Sequence[Any], Any]], *, copy: bool = False) -> dict[str, Any] | None:
    """Nested dicts (string keys) of stored leaves from (path parts, leaf) pairs; None when there are none.

    `copy` gives fresh buffers: a training step donates the state's arrays, which must not be the
    model definition's own.
    """
    out: dict[str, Any] = {}
    for parts, value in items:
        node = out
        for part in parts[:-1]:
            node = node.setdefault(str(part), {})
        value = store(value)
        node[str(parts[-1])] = jnp.array(value, copy=True) if copy else value
    return out or None


def take(tree: Any, parts: Sequence[Any]) -> Any:
    """The leaf of a nested-dict tree at path parts (compared as strings)."""
    for part in parts:
        tree = tree[str(part)]
    return tree
