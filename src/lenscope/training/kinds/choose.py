"""Which ModelKind handles a model: linen, NNX or Equinox (model_libraries.library_of); a clear error otherwise.

The NNX and Equinox kinds are imported on first use: only a model of that library (so imported already) needs one.
"""

from __future__ import annotations

from typing import Any

from ...errors import UsageError
from ...model_libraries import EQUINOX, LINEN, NNX, library_of
from .base import ModelKind
from .linen import LinenKind

__all__ = ["model_kind"]

_EXPECTED = ("build_model() must return a flax.linen.Module, a flax.nnx.Module (built with its nnx.Rngs) "
             "or an equinox.Module instance")


def model_kind(model: Any) -> ModelKind:
    """The ModelKind for a trainer's model; UsageError naming the supported kinds for anything else."""
    library = None if isinstance(model, type) else library_of(model)
    if library == LINEN:
        return LinenKind(model)
    if library == NNX:
        # lazy: flax.nnx is slow to import; only an NNX model (flax.nnx loaded already) needs its kind
        from .nnx import NnxKind
        return NnxKind(model)
    if library == EQUINOX:
        # lazy: equinox is slow to import; only an Equinox model (equinox loaded already) needs its kind
        from .equinox import EquinoxKind
        return EquinoxKind(model)
    if isinstance(model, type):
        raise UsageError(f"{_EXPECTED}, got the class {model.__module__}.{model.__qualname__}: build it "
                         "(NNX: Model(..., rngs=nnx.Rngs(seed)); Equinox: Model(..., key=jax.random.key(seed)))")
    raise UsageError(f"{_EXPECTED}, got a {type(model).__module__}.{type(model).__qualname__}")
