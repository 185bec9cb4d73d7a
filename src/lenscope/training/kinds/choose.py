"""Which ModelKind handles a model: linen, NNX or Equinox; a clear error for anything else.

NNX and Equinox are recognized through sys.modules and their kinds imported on first use: a model can only be
an nnx.Module or eqx.Module if that library is imported already, and a linen job should not pay for importing them.
"""

from __future__ import annotations

import sys
from typing import Any

import flax.linen as nn

from ...errors import UsageError
from .base import ModelKind
from .linen import LinenKind

__all__ = ["model_kind"]

_EXPECTED = ("build_model() must return a flax.linen.Module, a flax.nnx.Module (built with its nnx.Rngs) "
             "or an equinox.Module instance")


def _is_module_of(library: str, model: Any) -> bool:
    """Whether `model` is a `library.Module` instance, without importing `library` (unloaded: it cannot be)."""
    loaded = sys.modules.get(library)
    return loaded is not None and isinstance(model, loaded.Module)


def model_kind(model: Any) -> ModelKind:
    """The ModelKind for a trainer's model; UsageError naming the supported kinds for anything else."""
    if isinstance(model, nn.Module):
        return LinenKind(model)
    if _is_module_of("flax.nnx", model):
        # lazy: flax.nnx is slow to import; only an NNX model (flax.nnx loaded already) needs its kind
        from .nnx import NnxKind
        return NnxKind(model)
    if _is_module_of("equinox", model):
        # lazy: equinox is slow to import; only an Equinox model (equinox loaded already) needs its kind
        from .equinox import EquinoxKind
        return EquinoxKind(model)
    if isinstance(model, type):
        raise UsageError(f"{_EXPECTED}, got the class {model.__module__}.{model.__qualname__}: build it "
                         "(NNX: Model(..., rngs=nnx.Rngs(seed)); Equinox: Model(..., key=jax.random.key(seed)))")
    raise UsageError(f"{_EXPECTED}, got a {type(model).__module__}.{type(model).__qualname__}")
