"""The eager notebook Debugger (A10): list module paths, and stop a forward at one call to inspect it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import flax.linen as nn
import jax

from lenscope.analysis.inputs import DebugInputs
from lenscope.analysis.trace import CaptureError, Target, detach, discover, format_paths, module_path
from lenscope.errors import hint

__all__ = ["debug", "find"]


def find(trace_fn: Callable[..., Any], args: tuple, target: Target = nn.Module) -> list[str]:
    """Paths of TARGET calls in first-call order (same abstract trace as analysis discovery)."""
    return discover(trace_fn, args, target)


class _Reached(BaseException):
    """Unwinds the forward once the wanted call is reached (BaseException: user `except Exception` lets it pass)."""


def _has_tracer(tree: Any) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(tree))


@contextlib.contextmanager
def debug(trace_fn: Callable[..., Any], args: tuple, path: str) -> Iterator[tuple[nn.Module, DebugInputs]]:
    """Run trace_fn(*args) eagerly up to the first call of `path`; yield (bound layer, concrete DebugInputs)."""
    if not isinstance(path, str):
        raise CaptureError(f"debug() path must be a str module path like 'blocks_0/attn', got {path!r}")
    seen: dict[str, None] = {}
    found: list[tuple[nn.Module, DebugInputs]] = []

    def stop_at(next_fun, call_args, call_kwargs, context):
        module = context.module
        if context.method_name == "__call__" and module.scope is not None:
            here = module_path(module)
            seen.setdefault(here, None)
            if here == path:
                inputs = DebugInputs.bind(context.orig_method, call_args, call_kwargs)
                found.append((detach(module), inputs))
                raise _Reached()
        return next_fun(*call_args, **call_kwargs)

    try:
        with jax.disable_jit(), nn.intercept_methods(stop_at):
            trace_fn(*args)
    except _Reached:
        pass
    if not found:
        raise CaptureError(
            f"debug(): the forward never called {path!r}{hint(path, seen)}; paths it called: {format_paths(list(seen))}"
        )
    layer, inputs = found.pop()
    if _has_tracer(inputs) or _has_tracer(layer.variables):
        raise CaptureError(
            f"debug(): the inputs of {path!r} are traced values; pass the plain forward, not one wrapped "
            "in jax.vmap/jax.jit (the Debugger is eager)"
        )
    yield layer, inputs
