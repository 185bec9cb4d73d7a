"""Equinox models: floating-point arrays train, other arrays are model state, non-array leaves stay static."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax

from .definition_key import structure_key
from .leaves import nest, restore, take

__all__ = ["EquinoxKind"]

_PARAM, _STATE, _STATIC = 0, 1, 2


class EquinoxKind:
    """An Equinox module: its inexact arrays are params, other arrays model state, everything else static.

    Non-array leaves (activation functions, Python numbers, flags) cannot change inside a compiled
    step, so they are kept from the definition (the model build_model returns) and checkpoints hold
    arrays only.
    """

    name = "equinox"

    def __init__(self, model: eqx.Module) -> None:
        leaves, self.treedef = jax.tree_util.tree_flatten_with_path(model)
        self._leaves = [leaf for _, leaf in leaves]
        self._parts = [tuple(jax.tree_util.keystr((key,), simple=True) for key in path) for path, _ in leaves]
        self._roles = [_PARAM if eqx.is_inexact_array(leaf) else _STATE if eqx.is_array(leaf) else _STATIC
                       for leaf in self._leaves]

    def _nest(self, leaves: list[Any], role: int, copy: bool = False) -> Any:
        return nest(((parts, leaf) for parts, leaf, r in zip(self._parts, leaves, self._roles) if r == role),
                    copy=copy)

    def init_params(self, key: Any, inputs: Callable[[], tuple]) -> Any:
        """The floating-point arrays the model was built with, as nested dicts by path."""
        return self._nest(self._leaves, _PARAM, copy=True)

    def init_model_state(self) -> Any:
        """The model's other arrays (integer buffers, keys), or None."""
        return self._nest(self._leaves, _STATE, copy=True)

    def bind(self, params: Any, model_state: Any, train: bool) -> eqx.Module:
        """The module rebuilt with these arrays, with `inference` fields set for the mode."""
        trees = {_PARAM: params, _STATE: model_state}
        leaves = [leaf if role == _STATIC else restore(take(trees[role], parts), leaf)
                  for parts, leaf, role in zip(self._parts, self._leaves, self._roles)]
        return eqx.nn.inference_mode(jax.tree_util.tree_unflatten(self.treedef, leaves), value=not train)

    def definition_key(self) -> str | None:
        """What `bind` computes from params in evaluation mode: the definition's structure and static leaves, and
        the values of its other arrays (the model state it starts from), for lenscope's own modules only."""
        definition = jax.tree_util.tree_unflatten(self.treedef, self._leaves)
        return structure_key(definition, lambda leaf: not eqx.is_inexact_array(leaf))

    def read_state(self, module: eqx.Module) -> Any:
        """The module's non-trainable arrays (unchanged by a call: Equinox modules are immutable)."""
        return self._nest(jax.tree_util.tree_leaves(module), _STATE)

    def params_of(self, module: eqx.Module) -> Any:
        """The module's floating-point arrays as nested dicts by path."""
        leaves, _ = jax.tree_util.tree_flatten_with_path(eqx.filter(module, eqx.is_inexact_array))
        return nest((tuple(jax.tree_util.keystr((key,), simple=True) for key in path), leaf) for path, leaf in leaves)
