"""Flax linen models: `model.init` gives the params; a bound module is the callable model."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flax.linen as nn

from ..init_program import InitProgram
from .definition_key import faithful, own_type

__all__ = ["LinenKind", "linen_key"]


def _linen_params(model: nn.Module, key: Any, *inputs: Any) -> Any:
    return model.init(key, *inputs)["params"]


def _init_program(model: nn.Module) -> InitProgram:
    return InitProgram(functools.partial(_linen_params, model))


# Linen definitions are frozen dataclasses hashed by class and fields: equal models (every trainer of
# one job config in a process) share one init program, so it compiles once per input shapes.
_compiled_init = functools.lru_cache(maxsize=64)(_init_program)


def linen_key(model: nn.Module) -> str | None:
    """A linen definition's class and fields, when lenscope defines it and its repr is faithful; else None."""
    text = f"{type(model).__module__}.{type(model).__qualname__}:{model!r}"
    return text if own_type(type(model)) and faithful(text) else None


class LinenKind:
    """A linen module definition: parameters only (no model state), bound with `model.bind`."""

    name = "flax.linen"

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def init_params(self, key: Any, inputs: Callable[[], tuple]) -> Any:
        """`model.init(key, *inputs)["params"]`, as one compiled program shared by equal definitions (inside a
        caller's trace, as `eval_shape` or a sharded init, part of that trace)."""
        try:
            init = _compiled_init(self.model)
        except TypeError:  # a field that cannot be hashed: this definition compiles its own program
            init = _init_program(self.model)
        return init(key, *inputs())

    def init_model_state(self) -> None:
        """Linen models carry no model state here."""
        return None

    def bind(self, params: Any, model_state: Any, train: bool) -> nn.Module:
        """The module bound to `{"params": params}` (linen models take their mode as call arguments)."""
        return self.model.bind({"params": params})

    def definition_key(self) -> str | None:
        """What `bind` computes: the definition's class and fields, for lenscope's own definitions only."""
        return linen_key(self.model)

    def read_state(self, module: nn.Module) -> None:
        """No model state."""
        return None

    def params_of(self, module: nn.Module) -> Any:
        """The bound module's `params` collection."""
        return module.variables["params"]
