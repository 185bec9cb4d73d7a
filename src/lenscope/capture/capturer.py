"""Capturer: discover once, select once, build the jitted capture function once, compile once per signature."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from .backend import CaptureBackend, Target
from .capture import discover, make_capture_fn
from .choose import resolve_backend
from .paths import validate_selection
from .specs import signature

__all__ = ["Capturer"]

Choose = Callable[[list[str]], str | Sequence[str]]  # discovered paths -> select()'s value


class Capturer:
    """The capture of one analysis: `choose` picks from the discovered paths, `analyze` runs on what is captured.

    Everything is computed on first need from the arguments `(state, batch, key)` of the first call
    (arrays or their `abstract` specs), then kept: the selection, the jitted function, and one
    compiled executable per argument signature and compiler options.
    """

    def __init__(self, trace_fn: Callable[..., Any], target: Target, choose: Choose,
                 analyze: Callable[..., Any], backend: CaptureBackend | None = None) -> None:
        self.trace_fn, self.target, self.choose, self.analyze = trace_fn, target, choose, analyze
        self.backend = resolve_backend(backend)
        self._lock = threading.RLock()  # a tandem warm-up compiles on another thread than the one that runs
        self._selection: tuple[list[str], bool] | None = None
        self._function: Any = None
        self._executables: dict[tuple, jax.stages.Compiled] = {}

    def selection(self, args: tuple) -> tuple[list[str], bool]:
        """The checked selection (paths, is_list): one abstract trace for discovery, then choose(), once (A4)."""
        with self._lock:
            if self._selection is None:
                found = discover(self.trace_fn, args, self.target, backend=self.backend)
                self._selection = validate_selection(self.choose(list(found)), found)
            return self._selection

    def function(self, args: tuple) -> Any:
        """The jitted capture function of the selection, built once: same shapes never retrace (A5)."""
        with self._lock:
            if self._function is None:
                paths, as_list = self.selection(args)
                self._function = jax.jit(make_capture_fn(self.trace_fn, paths, as_list, self.analyze, self.target,
                                                         backend=self.backend))
            return self._function

    def executable(self, args: tuple, options: Mapping[str, Any] | None = None) -> jax.stages.Compiled:
        """The capture function compiled for these argument types with these XLA options, once each.

        Compiling ahead from `abstract` specs and calling later with the arrays use the same
        executable, whatever placement details jit's own cache would key on.
        """
        options = dict(options or {})
        key = (signature(args), tuple(sorted(options.items())))
        with self._lock:
            if key not in self._executables:
                self._executables[key] = self.function(args).lower(*args).compile(options or None)
            return self._executables[key]

    @property
    def compilations(self) -> int:
        """How many executables were compiled: one per distinct argument signature (and options)."""
        return len(self._executables)

    def reset(self) -> None:
        """Forget the selection, the function and the executables: the next use discovers and compiles again."""
        with self._lock:
            self._selection, self._function, self._executables = None, None, {}
