"""Discovery (A4) and capture inside one compiled trace (A5) of a forward, through a backend's interception."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax

from ..errors import UsageError
from .backend import CaptureBackend, ModuleCall, Target
from .choose import backend_of_forward, resolve_backend
from .paths import NOTHING_SEEN, CaptureError, format_paths
from .per_example import whole
from .results import validate_result

__all__ = ["discover", "make_capture_fn"]


def discover(trace_fn: Callable[..., Any], args: tuple, target: Target = None, *,
             backend: CaptureBackend | None = None) -> list[str]:
    """Paths of TARGET `__call__`s in first-call order, from one abstract trace (jax.eval_shape) of trace_fn(*args)."""
    backend = backend_of_forward(trace_fn, args, backend)
    kinds = backend.check_target(target)
    seen: dict[str, None] = {}

    def record(call: ModuleCall, proceed: Callable[[], Any]) -> Any:
        if call.targets(kinds):
            seen.setdefault(call.path, None)
        return proceed()

    with backend.intercept(record):
        # A fresh wrapper: eval_shape caches traces by function, and a cache hit would run no Python to intercept.
        jax.eval_shape(lambda *a: trace_fn(*a), *args)
    return list(seen)


class _Capture:
    """One capture run: state lives only for a single call of the capture function."""

    def __init__(self, paths: list[str], as_list: bool, analyze: Callable, kinds: tuple[type, ...],
                 backend: CaptureBackend):
        self.paths, self.as_list, self.analyze, self.kinds, self.backend = paths, as_list, analyze, kinds, backend
        self.wanted = frozenset(paths)
        self.captured: dict[str, list[Any]] = {}  # path -> [module, inputs, detached]
        self.called: dict[str, None] = {}
        self.depth = 0
        self.busy = False  # True while analyze runs: its own calls pass through uncaptured
        self.done = False
        self.result: Any = None

    def intercept(self, call: ModuleCall, proceed: Callable[[], Any]) -> Any:
        """The interceptor: record first calls; when the outermost call returns, run analyze."""
        if self.done or self.busy:
            return proceed()
        if call.targets(self.kinds):
            self.called.setdefault(call.path, None)
            if call.path in self.wanted and call.path not in self.captured:
                self.captured[call.path] = [call.module, whole(call.inputs()), False]
        self.depth += 1
        try:
            out = proceed()
        finally:
            self.depth -= 1
        if self.depth == 0:
            self._outermost_returned(call.module)
        return out

    def _outermost_returned(self, top: Any) -> None:
        if len(self.captured) < len(self.wanted):
            # The apply around this call may end before the rest is captured and would strand these modules.
            for entry in self.captured.values():
                if not entry[2]:
                    entry[0], entry[2] = self.backend.detach(entry[0]), True
            return
        layers, inputs, fresh = [], [], {}
        for path in self.paths:
            module, args, detached = self.captured[path]
            if module is top and not detached:
                # `top`'s call is still on the library's stack; re-entering a module there could mis-name children.
                module = fresh.setdefault(path, self.backend.detach(module))
            layers.append(module)
            inputs.append(args)
        self.busy = True
        try:
            result = self.analyze(layers, inputs) if self.as_list else self.analyze(layers[0], inputs[0])
        except jax.errors.UnexpectedTracerError as err:
            raise CaptureError(
                f"analyze() used a value captured inside a JAX transform (vmap/scan/remat) around {self.paths}; "
                "select a module called outside such transforms"
            ) from err
        finally:
            self.busy = False
        validate_result(result)
        self.result, self.done = result, True

    def clear(self) -> None:
        """Drop every captured module, input and result so no tracer outlives the trace."""
        self.captured.clear()
        self.called.clear()
        self.result = None


def make_capture_fn(
    trace_fn: Callable[..., Any],
    paths: Sequence[str],
    as_list: bool,
    analyze: Callable[..., Any],
    target: Target = None,
    *,
    with_output: bool = False,
    backend: CaptureBackend | None = None,
) -> Callable[..., Any]:
    """A pure f(*args) for one jax.jit: runs trace_fn, captures each path's first call, returns analyze's PyTree."""
    backend = resolve_backend(backend)
    kinds = backend.check_target(target)
    paths = list(paths)
    if not paths or not all(isinstance(p, str) for p in paths):
        raise CaptureError(f"make_capture_fn needs a nonempty list of path strings, got {paths!r}")
    if not as_list and len(paths) != 1:
        raise CaptureError(f"a single (non-list) selection captures exactly one path, got {paths!r}")
    if not callable(analyze):
        raise UsageError(f"analyze must be callable, got {type(analyze).__name__}")

    def capture(*args: Any) -> Any:
        session = _Capture(paths, as_list, analyze, kinds, backend)
        try:
            with backend.intercept(session.intercept):
                output = trace_fn(*args)
            if not session.done:
                missing = [p for p in paths if p not in session.captured]
                if not session.called:
                    raise CaptureError(f"the traced forward made no module calls; {NOTHING_SEEN}")
                raise CaptureError(
                    f"selected path(s) {format_paths(missing)} never called by the traced forward; "
                    f"paths it called: {format_paths(list(session.called))}"
                )
            result = session.result
        finally:
            session.clear()
        return (result, output) if with_output else result

    capture.__name__ = f"capture_{getattr(analyze, '__name__', 'analyze')}"
    capture.__qualname__ = capture.__name__
    return capture
