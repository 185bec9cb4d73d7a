"""The sharding of every leaf of a TrainState: parameters by the rules, optimizer state as its parameter.

Optax states mirror the parameters (Adam's `mu` and `nu` hold one leaf per parameter, at the same
path below their own prefix): an optimizer leaf whose path ends with a parameter's path and has its
shape gets that parameter's sharding. Everything else (step, key, counts, model state) is replicated.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .rules import Rules
from .state import key_path

__all__ = ["param_sharding", "state_shardings"]


def param_sharding(mesh: Mesh, rules: Rules, path: str, shape: tuple[int, ...]) -> NamedSharding:
    """The sharding the rules give the parameter at `path` (`blocks/0/attn/query/kernel`) of this shape."""
    return NamedSharding(mesh, rules.spec(path, tuple(shape), dict(mesh.shape)))


def state_shardings(state: Any, mesh: Mesh, rules: Rules) -> Any:
    """A tree like `state` (a TrainState, concrete or abstract) of NamedShardings; a bad rule is a ConfigError."""
    replicated = NamedSharding(mesh, PartitionSpec())
    params: dict[str, tuple[tuple[int, ...], NamedSharding]] = {}

    def param(path: tuple, leaf: Any) -> NamedSharding:
        name, shape = key_path(path), tuple(np.shape(leaf))
        sharding = param_sharding(mesh, rules, name, shape)
        params[name] = (shape, sharding)
        return sharding

    def mirror(path: tuple, leaf: Any) -> NamedSharding:
        parts, shape = key_path(path).split("/"), tuple(np.shape(leaf))
        for start in range(len(parts)):
            found = params.get("/".join(parts[start:]))
            if found is not None and found[0] == shape:
                return found[1]
        return replicated

    def everywhere(tree: Any) -> Any:
        return jax.tree_util.tree_map(lambda leaf: replicated, tree)

    return state.replace(
        step=replicated, key=replicated,
        params=jax.tree_util.tree_map_with_path(param, state.params),
        opt_state=jax.tree_util.tree_map_with_path(mirror, state.opt_state),
        model_state=everywhere(state.model_state),
    )
