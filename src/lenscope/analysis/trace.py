"""Discovery (A4) and capture inside one compiled trace (A5) of any Flax linen forward, by method interception."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax

from lenscope.analysis.inputs import DebugInputs
from lenscope.analysis.results import validate_result
from lenscope.errors import UsageError, hint

__all__ = [
    "CaptureError",
    "detach",
    "discover",
    "make_capture_fn",
    "module_path",
    "validate_result",
    "validate_selection",
]

Target = type | tuple[type, ...]
_NOTHING_SEEN = (
    "does the forward call model.apply (a linen module), and not inside its own jax.jit, whose trace "
    "cache skips the Python code that interception sees? Also check TARGET"
)


class CaptureError(UsageError):
    """A selection or capture that cannot be honoured: unknown path, path never called, bad select() value."""


def module_path(module: nn.Module) -> str:
    """The '/'-joined scope path of a bound module; the root module is ''."""
    return "/".join(str(part) for part in module.path)


def format_paths(paths: Sequence[str]) -> str:
    """Discovered paths for an error message, with the root shown as '' (root)."""
    if not paths:
        return "(none)"
    return ", ".join("'' (root)" if p == "" else repr(p) for p in paths)


def check_target(target: Any) -> tuple[type, ...]:
    """Normalise TARGET to a tuple of linen Module subclasses, or raise UsageError naming the bad entry."""
    items = target if isinstance(target, tuple) else (target,)
    for item in items:
        if not (isinstance(item, type) and issubclass(item, nn.Module)):
            raise UsageError(
                f"TARGET must be a flax.linen.Module subclass or a tuple of them, got {item!r}"
            )
    if not items:
        raise UsageError("TARGET must be a flax.linen.Module subclass or a nonempty tuple of them, got ()")
    return items


def _is_target_call(context: Any, target: tuple[type, ...]) -> bool:
    module = context.module
    return context.method_name == "__call__" and isinstance(module, target) and module.scope is not None


def discover(trace_fn: Callable[..., Any], args: tuple, target: Target = nn.Module) -> list[str]:
    """Paths of TARGET `__call__`s in first-call order, from one abstract trace (jax.eval_shape) of trace_fn(*args)."""
    kinds = check_target(target)
    seen: dict[str, None] = {}

    def record(next_fun, call_args, call_kwargs, context):
        if _is_target_call(context, kinds):
            seen.setdefault(module_path(context.module), None)
        return next_fun(*call_args, **call_kwargs)

    with nn.intercept_methods(record):
        # A fresh wrapper: eval_shape caches traces by function, and a cache hit would run no Python to intercept.
        jax.eval_shape(lambda *a: trace_fn(*a), *args)
    return list(seen)


def validate_selection(selection: Any, discovered: Sequence[str]) -> tuple[list[str], bool]:
    """Check select()'s value: a str gives ([s], False), a nonempty list/tuple of str gives (list, True)."""
    known = list(discovered)
    expected = "select() must return one discovered path (str) or a nonempty list of them"
    if not known:
        raise CaptureError(f"no module calls were discovered, so nothing can be selected; {_NOTHING_SEEN}")
    if isinstance(selection, str):
        paths, as_list = [selection], False
    elif isinstance(selection, (list, tuple)):
        if not selection:
            raise CaptureError(f"{expected}; got an empty {type(selection).__name__}. "
                               f"Discovered: {format_paths(known)}")
        paths, as_list = list(selection), True
    else:
        raise CaptureError(f"{expected}; got {type(selection).__name__} {selection!r}. "
                           f"Discovered: {format_paths(known)}")
    for i, path in enumerate(paths):
        where = f"item {i} " if as_list else ""
        if not isinstance(path, str):
            raise CaptureError(f"{expected}; {where}is {type(path).__name__} {path!r}. "
                               f"Discovered: {format_paths(known)}")
        if path not in known:
            raise CaptureError(f"select() {where}returned unknown path {path!r}{hint(path, known)}. "
                               f"Discovered: {format_paths(known)}")
    return paths, as_list


def detach(module: nn.Module) -> nn.Module:
    """A copy of a bound module re-bound to its own variables, rngs and mutability; valid outside its apply."""
    scope = module.scope
    rngs = {}
    for name, rng in (scope.rngs or {}).items():
        # flax keeps rngs as LazyRng (a key plus a static suffix); as_jax_rng folds the suffix without consuming it
        rngs[name] = rng.as_jax_rng() if hasattr(rng, "as_jax_rng") else rng
    unbound, variables = module.unbind()
    return unbound.bind(variables, rngs=rngs or None, mutable=scope.mutable)


class _Capture:
    """One capture run: state lives only for a single call of the capture function."""

    def __init__(self, paths: list[str], as_list: bool, analyze: Callable, target: tuple[type, ...]):
        self.paths, self.as_list, self.analyze, self.target = paths, as_list, analyze, target
        self.wanted = frozenset(paths)
        self.captured: dict[str, list[Any]] = {}  # path -> [module, inputs, detached]
        self.called: dict[str, None] = {}
        self.depth = 0
        self.busy = False  # True while analyze runs: its own calls pass through uncaptured
        self.done = False
        self.result: Any = None

    def intercept(self, next_fun, args, kwargs, context):
        """The linen interceptor: record first calls; when the outermost call returns, run analyze."""
        if self.done or self.busy:
            return next_fun(*args, **kwargs)
        if _is_target_call(context, self.target):
            path = module_path(context.module)
            self.called.setdefault(path, None)
            if path in self.wanted and path not in self.captured:
                inputs = DebugInputs.bind(context.orig_method, args, kwargs)
                self.captured[path] = [context.module, inputs, False]
        self.depth += 1
        try:
            out = next_fun(*args, **kwargs)
        finally:
            self.depth -= 1
        if self.depth == 0:
            self._outermost_returned(context.module)
        return out

    def _outermost_returned(self, top: nn.Module) -> None:
        if len(self.captured) < len(self.wanted):
            # The apply around this call may end before the rest is captured and would strand these modules.
            for entry in self.captured.values():
                if not entry[2]:
                    entry[0], entry[2] = detach(entry[0]), True
            return
        layers, inputs, fresh = [], [], {}
        for path in self.paths:
            module, args, detached = self.captured[path]
            if module is top and not detached:
                # `top`'s call is still on flax's stack; re-entering a compact module there would mis-name children.
                module = fresh.setdefault(path, detach(module))
            layers.append(module)
            inputs.append(args)
        self.busy = True
        try:
            if self.as_list:
                result = self.analyze(layers, inputs)
            else:
                result = self.analyze(layers[0], inputs[0])
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
    target: Target = nn.Module,
    *,
    with_output: bool = False,
) -> Callable[..., Any]:
    """A pure f(*args) for one jax.jit: runs trace_fn, captures each path's first call, returns analyze's PyTree."""
    kinds = check_target(target)
    paths = list(paths)
    if not paths or not all(isinstance(p, str) for p in paths):
        raise CaptureError(f"make_capture_fn needs a nonempty list of path strings, got {paths!r}")
    if not as_list and len(paths) != 1:
        raise CaptureError(f"a single (non-list) selection captures exactly one path, got {paths!r}")
    if not callable(analyze):
        raise UsageError(f"analyze must be callable, got {type(analyze).__name__}")

    def capture(*args: Any) -> Any:
        session = _Capture(paths, as_list, analyze, kinds)
        try:
            with nn.intercept_methods(session.intercept):
                output = trace_fn(*args)
            if not session.done:
                missing = [p for p in paths if p not in session.captured]
                if not session.called:
                    raise CaptureError(f"the traced forward made no module calls; {_NOTHING_SEEN}")
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
