"""Flax NNX models: split into Params and the rest of their state; merged again inside each traced function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flax import nnx

from ...errors import UsageError
from .leaves import nest, restore, take

__all__ = ["NnxKind"]


def check_rngs(model: nnx.Module) -> None:
    """A UsageError when a stochastic submodule was built without its RNG stream (it could not train)."""
    for parts, module in nnx.iter_modules(model):
        if isinstance(module, nnx.Dropout) and module.rngs is None and module.rate > 0:
            path = "/".join(map(str, parts)) or "(root)"
            raise UsageError(f"the NNX model's {type(module).__name__} at {path!r} has no nnx.Rngs: build the "
                             "model with its Rngs (e.g. rngs=nnx.Rngs(params=seed, dropout=seed + 1)) so its "
                             "random state is part of the model and of its checkpoints")


class NnxKind:
    """An NNX module: its nnx.Param state trains, the rest (batch statistics, RNG state) is model state."""

    name = "flax.nnx"

    def __init__(self, model: nnx.Module) -> None:
        check_rngs(model)
        self.graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        self._params = list(nnx.to_flat_state(params))
        self._rest = list(nnx.to_flat_state(rest))

    def init_params(self, key: Any, inputs: Callable[[], tuple]) -> Any:
        """The parameters the model was built with (by its nnx.Rngs), as nested dicts by path."""
        return nest(((path, var.get_value()) for path, var in self._params), copy=True)

    def init_model_state(self) -> Any:
        """The rest of the model's state as built (batch statistics, RNG keys and counts), or None."""
        return nest(((path, var.get_value()) for path, var in self._rest), copy=True)

    def bind(self, params: Any, model_state: Any, train: bool) -> nnx.Module:
        """`nnx.merge` of the graph with these arrays, in `.train()` or `.eval()` mode."""
        module = nnx.merge(self.graphdef, self._state(self._params, params), self._state(self._rest, model_state))
        if train:
            module.train()
        else:
            module.eval()
        return module

    def read_state(self, module: nnx.Module) -> Any:
        """The bound module's non-parameter state at the definition's paths."""
        current = dict(nnx.to_flat_state(nnx.state(module, nnx.Not(nnx.Param))))
        return nest((path, current[path].get_value()) for path, _ in self._rest)

    def params_of(self, module: nnx.Module) -> Any:
        """The module's nnx.Param state as nested dicts by path."""
        return nest((path, var.get_value()) for path, var in nnx.to_flat_state(nnx.state(module, nnx.Param)))

    @staticmethod
    def _state(template: list[tuple[tuple, Any]], tree: Any) -> nnx.State:
        return nnx.from_flat_state([(path, var.replace(value=restore(take(tree, path), var.get_value())))
                                    for path, var in template])
