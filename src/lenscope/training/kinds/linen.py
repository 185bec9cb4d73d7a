"""Flax linen models: `model.init` gives the params; a bound module is the callable model."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import numpy as np

from ...compile_options import QUICK
from .definition_key import faithful, own_type

__all__ = ["LinenKind", "linen_key"]


# Parameters below which the init compiles with QUICK options: it runs once, so a small model's wait is its compile
# time; a large model's is the run, which XLA's optimizations shorten (bench/quick_init.py: 57K parameters 0.46x,
# 0.8M 0.60x, 12.7M 1.1x, 101M 3x the default's time).
QUICK_BELOW = 4_000_000


class InitProgram:
    """A linen definition's init, `model.init(key, *inputs)["params"]`, compiled once per argument signature: with
    QUICK options when it makes fewer than `quick_below` parameters, else with XLA's optimizations."""

    def __init__(self, model: nn.Module, quick_below: int = QUICK_BELOW) -> None:
        def init(key: Any, *inputs: Any) -> Any:
            return model.init(key, *inputs)["params"]

        self._jitted = jax.jit(init)
        self.quick_below = quick_below
        self.options: dict[tuple, dict | None] = {}  # the XLA options each signature was compiled with
        self._compiled: dict[tuple, jax.stages.Compiled] = {}

    def __call__(self, key: Any, *inputs: Any) -> Any:
        leaves, tree = jax.tree.flatten((key, *inputs))
        found = (tree, tuple((np.shape(leaf), str(getattr(leaf, "dtype", type(leaf)))) for leaf in leaves))
        if found not in self._compiled:
            traced = self._jitted.trace(key, *inputs)
            size = sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(traced.out_info))
            self.options[found] = dict(QUICK) if size < self.quick_below else None
            self._compiled[found] = traced.lower().compile(self.options[found])
        return self._compiled[found](key, *inputs)


# Linen definitions are frozen dataclasses hashed by class and fields: equal models (every trainer of
# one job config in a process) share one init program, so it compiles once per input shapes.
_compiled_init = functools.lru_cache(maxsize=64)(InitProgram)


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
        if isinstance(key, jax.core.Tracer):  # a compiled program cannot run inside another trace
            return self.model.init(key, *inputs())["params"]
        try:
            init = _compiled_init(self.model)
        except TypeError:  # a field that cannot be hashed: this definition compiles its own program
            init = InitProgram(self.model)
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
