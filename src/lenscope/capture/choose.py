"""Which backend captures a model: the first that accepts it (flax.linen, flax.nnx, equinox)."""

from __future__ import annotations

from typing import Any

from ..errors import UsageError
from .backend import CaptureBackend
from .equinox import EquinoxBackend
from .linen import LinenBackend
from .nnx import NnxBackend

__all__ = ["BACKENDS", "backend_for", "resolve_backend"]

LINEN = LinenBackend()
BACKENDS: tuple[CaptureBackend, ...] = (LINEN, NnxBackend(), EquinoxBackend())


def backend_for(model: Any) -> CaptureBackend:
    """The backend for a trainer's model definition; UsageError naming the supported libraries otherwise."""
    for backend in BACKENDS:
        if backend.accepts(model):
            return backend
    supported = ", ".join(f"{b.name} modules" for b in BACKENDS)
    what = f"the class {model.__qualname__} as a" if isinstance(model, type) else (
        f"a {type(model).__module__}.{type(model).__qualname__}")
    raise UsageError(f"lenscope cannot capture {what} model: analyses and the Debugger support {supported} "
                     "(an instance); build_model() must return one")


def resolve_backend(backend: CaptureBackend | None) -> CaptureBackend:
    """The given backend, or linen's when none is named (callers without a model, e.g. a bare forward function)."""
    return LINEN if backend is None else backend
