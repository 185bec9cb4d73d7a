"""Which backend captures a model: the first that accepts it (flax.linen, flax.nnx, equinox).

The NNX and Equinox backends are imported on first use: flax.nnx and equinox cost a third of a second to
import, and a model can only be one of their modules if its library is imported already (model_libraries).
"""

from __future__ import annotations

import functools
from typing import Any

from ..errors import UsageError
from ..model_libraries import EQUINOX, LIBRARIES, NNX, loaded
from .backend import CaptureBackend
from .linen import LinenBackend

__all__ = ["LIBRARIES", "backend_for", "backend_of_forward", "backends", "resolve_backend"]

LINEN = LinenBackend()


@functools.cache
def _nnx() -> CaptureBackend:
    # lazy: flax.nnx is slow to import and only an NNX model needs it (and then flax.nnx is loaded already)
    from .nnx import NnxBackend
    return NnxBackend()


@functools.cache
def _equinox() -> CaptureBackend:
    # lazy: equinox is slow to import and only an Equinox model needs it (and then equinox is loaded already)
    from .equinox import EquinoxBackend
    return EquinoxBackend()


_LAZY = {NNX: _nnx, EQUINOX: _equinox}  # library module -> its backend, made on first use


def backends() -> tuple[CaptureBackend, ...]:
    """The backend of each model library imported in this process, linen's first (one per library, reused)."""
    return (LINEN, *(make() for library, make in _LAZY.items() if loaded(library)))


def backend_for(model: Any) -> CaptureBackend:
    """The backend for a trainer's model definition; UsageError naming the supported libraries otherwise."""
    for backend in backends():
        if backend.accepts(model):
            return backend
    supported = ", ".join(f"{name} modules" for name in LIBRARIES)
    what = f"the class {model.__qualname__} as a" if isinstance(model, type) else (
        f"a {type(model).__module__}.{type(model).__qualname__}")
    raise UsageError(f"lenscope cannot capture {what} model: analyses and the Debugger support {supported} "
                     "(an instance); build_model() must return one")


def resolve_backend(backend: CaptureBackend | None) -> CaptureBackend:
    """The given backend, or linen's when none is named (callers without a model, e.g. a bare forward function)."""
    return LINEN if backend is None else backend


def _holders(fn: Any, args: tuple) -> list[Any]:
    """Where a forward's model may sit: the callable, its bound instance, a partial's function and arguments,
    the cells its closure captured, and its own arguments."""
    found = [fn, getattr(fn, "__self__", None)]
    if isinstance(fn, functools.partial):
        found += [fn.func, *fn.args, *fn.keywords.values()]
    found += [cell.cell_contents for cell in (getattr(fn, "__closure__", None) or ()) if _filled(cell)]
    return [*found, *args]


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:  # an empty cell: a variable not yet assigned
        return False
    return True


def backend_of_forward(fn: Any, args: tuple, backend: CaptureBackend | None = None) -> CaptureBackend:
    """The given backend, else the one of the model that `fn` calls (found on `fn` or in its arguments), else
    linen's: a user's forward (`lambda t: model(t)`) needs no backend named when its model is visible."""
    if backend is not None:
        return backend
    for holder in _holders(fn, args):
        for candidate in backends():
            if holder is not None and candidate.accepts(holder):
                return candidate
    return LINEN
