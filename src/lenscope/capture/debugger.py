"""The eager notebook Debugger (A10): list module paths, and stop a forward at one call to inspect it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import jax

from ..errors import hint
from .backend import CaptureBackend, ModuleCall, Target
from .capture import discover
from .choose import resolve_backend
from .inputs import DebugInputs
from .paths import CaptureError, format_paths

__all__ = ["debug", "find"]


def find(trace_fn: Callable[..., Any], args: tuple, target: Target = None, *,
         backend: CaptureBackend | None = None) -> list[str]:
    """Paths of TARGET calls in first-call order (same abstract trace as analysis discovery)."""
    return discover(trace_fn, args, target, backend=backend)


class _Reached(BaseException):
    """Unwinds the forward once the wanted call is reached (BaseException: user `except Exception` lets it pass)."""


def _has_tracer(tree: Any) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(tree))


@contextlib.contextmanager
def debug(trace_fn: Callable[..., Any], args: tuple, path: str, *,
          backend: CaptureBackend | None = None) -> Iterator[tuple[Any, DebugInputs]]:
    """Run trace_fn(*args) eagerly up to the first call of `path`; yield (detached layer, concrete DebugInputs)."""
    backend = resolve_backend(backend)
    if not isinstance(path, str):
        raise CaptureError(f"debug() path must be a str module path like 'blocks_0/attn', got {path!r}")
    seen: dict[str, None] = {}
    found: list[tuple[Any, DebugInputs]] = []

    def stop_at(call: ModuleCall, proceed: Callable[[], Any]) -> Any:
        if call.forward:
            seen.setdefault(call.path, None)
            if call.path == path:
                found.append((backend.detach(call.module), call.inputs()))
                raise _Reached()
        return proceed()

    try:
        with jax.disable_jit(), backend.intercept(stop_at):
            trace_fn(*args)
    except _Reached:
        pass
    if not found:
        raise CaptureError(
            f"debug(): the forward never called {path!r}{hint(path, seen)}; paths it called: {format_paths(list(seen))}"
        )
    layer, inputs = found.pop()
    if _has_tracer(inputs) or _has_tracer(backend.variables(layer)):
        raise CaptureError(
            f"debug(): the inputs of {path!r} are traced values; pass the plain forward, not one wrapped "
            "in jax.vmap/jax.jit (the Debugger is eager)"
        )
    yield layer, inputs
