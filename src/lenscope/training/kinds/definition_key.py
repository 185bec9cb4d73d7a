"""Keys of what a model definition computes from its parameters, for programs saved across processes: only where
every node of the definition is lenscope's own (its code is then covered by a digest of lenscope's source) and each
part's text says all there is to it."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from .leaves import store

__all__ = ["faithful", "own_type", "structure_key", "structure_text"]

_PLAIN = (tuple, list, dict, type(None))  # containers whose node data is their keys alone


def own_type(cls: type) -> bool:
    """Whether `cls` is defined by lenscope (a user's subclass may compute anything)."""
    return cls.__module__.startswith("lenscope.")


def faithful(text: str) -> bool:
    """Whether a repr can stand for its value: no object address, nothing elided."""
    return "0x" not in text and "..." not in text


@functools.lru_cache(maxsize=256)
def structure_text(treedef: Any) -> str | None:
    """A tree structure as text, with every node's module-qualified type; None when a node is neither a plain
    container nor lenscope's own, or the text is not faithful. Cached: saved programs describe their arguments by
    it on every call."""
    found: set[type] = set()
    pending = [treedef]
    while pending:
        node = pending.pop()
        data = node.node_data()
        if data is not None:
            found.add(data[0])
        pending.extend(node.children())
    text = f"{treedef}|{','.join(sorted(f'{cls.__module__}.{cls.__qualname__}' for cls in found))}"
    return text if all(cls in _PLAIN or own_type(cls) for cls in found) and faithful(text) else None


def structure_key(tree: Any, constants: Callable[[Any], bool] = lambda leaf: False) -> str | None:
    """A key of `tree` as a definition: its structure, node types and static data, the repr of each non-array leaf,
    each array leaf's dtype and shape, and the values of the arrays `constants` selects (those a program holds);
    None unless every node is a plain container or lenscope's own and every repr is faithful."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    structure = structure_text(treedef)
    if structure is None:
        return None
    parts = [structure]
    values = hashlib.sha256()
    for leaf in leaves:
        if isinstance(leaf, (jax.Array, np.ndarray)):
            array = np.asarray(store(leaf))
            parts.append(f"{array.dtype.str}{array.shape}")
            if constants(leaf):
                values.update(np.ascontiguousarray(array).tobytes())
        else:
            parts.append(repr(leaf))
    text = "|".join(parts)
    return hashlib.sha256(f"{text}|{values.hexdigest()}".encode()).hexdigest() if faithful(text) else None
