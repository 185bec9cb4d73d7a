"""Which ModelKind handles a model: linen, NNX or Equinox; a clear error for anything else."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import flax.linen as nn
from flax import nnx

from ...errors import UsageError
from .base import ModelKind
from .equinox import EquinoxKind
from .linen import LinenKind
from .nnx import NnxKind

__all__ = ["model_kind"]

_EXPECTED = ("build_model() must return a flax.linen.Module, a flax.nnx.Module (built with its nnx.Rngs) "
             "or an equinox.Module instance")


def model_kind(model: Any) -> ModelKind:
    """The ModelKind for a trainer's model; UsageError naming the supported kinds for anything else."""
    if isinstance(model, nn.Module):
        return LinenKind(model)
    if isinstance(model, nnx.Module):
        return NnxKind(model)
    if isinstance(model, eqx.Module):
        return EquinoxKind(model)
    if isinstance(model, type):
        raise UsageError(f"{_EXPECTED}, got the class {model.__module__}.{model.__qualname__}: build it "
                         "(NNX: Model(..., rngs=nnx.Rngs(seed)); Equinox: Model(..., key=jax.random.key(seed)))")
    raise UsageError(f"{_EXPECTED}, got a {type(model).__module__}.{type(model).__qualname__}")
