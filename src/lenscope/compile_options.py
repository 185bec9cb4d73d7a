"""XLA options for programs that run once (a model's init, a prompt's attribution setup), and `InitProgram`, an
init compiled with them when the compile is the wait: bench/quick_init.py measures both."""

from __future__ import annotations

import math
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import jax
import numpy as np

QUICK = MappingProxyType({"xla_backend_optimization_level": 0})  # XLA's backend optimizations off

# Parameters below which an init compiles with QUICK options: it runs once, so a small model's wait is its compile
# time; a large model's is the run, which XLA's optimizations shorten (bench/quick_init.py: a linen model of 57K
# parameters 0.47x, 0.8M 0.62x, 12.7M 1.06x, 101M 3x the default's time).
QUICK_BELOW = 4_000_000


class InitProgram:
    """`init(key, *inputs)` (fresh parameters) compiled once per argument signature: with QUICK options when it makes
    fewer than `quick_below` numbers, else with XLA's optimizations. Inside a caller's trace (`eval_shape`, a
    sharded init) it is traced into that trace."""

    def __init__(self, init: Callable[..., Any], quick_below: int = QUICK_BELOW) -> None:
        self.init, self.quick_below = init, quick_below
        self._jitted = jax.jit(init)
        self.options: dict[tuple, dict | None] = {}  # the XLA options each signature was compiled with
        self._compiled: dict[tuple, jax.stages.Compiled] = {}

    def __call__(self, key: Any, *inputs: Any) -> Any:
        leaves, tree = jax.tree.flatten((key, *inputs))
        if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):  # a compiled program cannot run in a trace
            return self.init(key, *inputs)
        found = (tree, tuple((np.shape(leaf), str(getattr(leaf, "dtype", type(leaf)))) for leaf in leaves))
        if found not in self._compiled:
            traced = self._jitted.trace(key, *inputs)
            size = sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(traced.out_info))
            self.options[found] = dict(QUICK) if size < self.quick_below else None
            self._compiled[found] = traced.lower().compile(self.options[found])
        return self._compiled[found](key, *inputs)
