"""An init (fresh parameters) compiled ahead, once per argument signature, with the XLA options that make its wait
shortest: it runs once, so a small model's wait is the compile and a large model's the run (bench/quick_init.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax

from ..capture.specs import signature
from ..compile_options import QUICK

# Parameters below which an init compiles with QUICK options (bench/quick_init.py: a linen model of 57K parameters
# 0.47x, 0.8M 0.62x, 12.7M 1.06x, 101M 3x the default's time).
QUICK_BELOW = 4_000_000


class InitProgram:
    """`init(key, *inputs)` compiled once per argument signature: with QUICK options when it makes fewer than
    `quick_below` numbers, else with XLA's optimizations. Inside a caller's trace (`eval_shape`, a sharded init) it
    is traced into that trace."""

    def __init__(self, init: Callable[..., Any], quick_below: int = QUICK_BELOW) -> None:
        self.init, self.quick_below = init, quick_below
        self._jitted = jax.jit(init)
        self._programs: dict[tuple, tuple[dict | None, jax.stages.Compiled]] = {}  # signature -> (options, program)

    @property
    def options(self) -> dict[tuple, dict | None]:
        """The XLA options each argument signature was compiled with (None: XLA's defaults)."""
        return {found: options for found, (options, _) in self._programs.items()}

    def __call__(self, key: Any, *inputs: Any) -> Any:
        args = (key, *inputs)
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(args)):  # no compiled call in a trace
            return self.init(*args)
        found = signature(args)
        if found not in self._programs:
            traced = self._jitted.trace(*args)
            size = sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(traced.out_info))
            options = dict(QUICK) if size < self.quick_below else None
            self._programs[found] = options, traced.lower().compile(options)
        return self._programs[found][1](*args)
