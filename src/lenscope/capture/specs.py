"""What a compiled executable is specialized to: abstract specs of a tree's arrays and their hashable signature."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

__all__ = ["abstract", "signature"]


def abstract(tree: Any) -> Any:
    """Shapes, dtypes, weak types and shardings of a tree's arrays: what compiling for them needs."""
    def spec(leaf: Any) -> Any:
        if isinstance(leaf, jax.Array):
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=leaf.sharding, weak_type=leaf.weak_type)
        return leaf
    return jax.tree.map(spec, tree)


def signature(tree: Any) -> tuple:
    """What an executable is specialized to: the tree structure and each leaf's shape, dtype, weak type (PRNG key
    arrays have none), sharding.

    Arrays and their `abstract` specs give the same signature.
    """
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple(
        (leaf.shape, leaf.dtype, getattr(leaf, "weak_type", False), leaf.sharding) if hasattr(leaf, "sharding")
        else (np.shape(leaf), np.result_type(leaf), True)
        for leaf in leaves
    )
