"""Capturer: discover once, select once, build the jitted capture function once, compile once per signature."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import jax

from .backend import CaptureBackend, Target
from .capture import discover, make_capture_fn
from .choose import resolve_backend
from .lifted import Mode, lift
from .paths import validate_selection
from .specs import signature

__all__ = ["Capturer"]

KEPT = 8  # jitted functions kept, one per distinct outside reads (an analysis whose attributes change)
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
        self._functions: dict[Hashable, Any] = {}
        self._executables: dict[tuple, jax.stages.Compiled] = {}
        self.compiled = 0

    def selection(self, args: tuple) -> tuple[list[str], bool]:
        """The checked selection (paths, is_list): one abstract trace for discovery, then choose(), once (A4)."""
        with self._lock:
            if self._selection is None:
                found = discover(self.trace_fn, args, self.target, backend=self.backend)
                self._selection = validate_selection(self.choose(list(found)), found)
            return self._selection

    def reads(self) -> Hashable:
        """What `analyze` and the forward read besides their arguments (attributes their code names on the
        analysis, globals, closures), as a key: when it changes, the next run traces again (never stale, P7)."""
        return lift(self.analyze, Mode.STATIC, by_attributes=True).key, \
            lift(self.trace_fn, Mode.STATIC, by_attributes=True).key

    def function(self, args: tuple, reads: Hashable | None = None) -> Any:
        """The jitted capture function of the selection, built once per `reads`: same shapes never retrace (A5)."""
        reads = self.reads() if reads is None else reads
        with self._lock:
            if reads not in self._functions:
                paths, as_list = self.selection(args)
                self._functions[reads] = jax.jit(make_capture_fn(self.trace_fn, paths, as_list, self.analyze,
                                                                 self.target, backend=self.backend))
                while len(self._functions) > KEPT:
                    self._functions.pop(next(iter(self._functions)))
            return self._functions[reads]

    def executable(self, args: tuple, options: Mapping[str, Any] | None = None) -> jax.stages.Compiled:
        """The capture function compiled for these argument types with these XLA options, once each.

        Compiling ahead from `abstract` specs and calling later with the arrays use the same
        executable, whatever placement details jit's own cache would key on.
        """
        options = dict(options or {})
        reads = self.reads()
        key = (signature(args), tuple(sorted(options.items())), reads)
        with self._lock:
            if key not in self._executables:
                self._executables[key] = self.function(args, reads).lower(*args).compile(options or None)
                self.compiled += 1
                while len(self._executables) > KEPT * 4:
                    self._executables.pop(next(iter(self._executables)))
            return self._executables[key]

    @property
    def compilations(self) -> int:
        """How many executables were compiled: one per distinct argument signature, options and outside reads."""
        return self.compiled

    def reset(self) -> None:
        """Forget the selection, the function and the executables: the next use discovers and compiles again."""
        with self._lock:
            self._selection, self._functions, self._executables, self.compiled = None, {}, {}, 0
