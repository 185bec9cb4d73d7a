"""Model kinds: how the trainer initializes, binds and checkpoints linen, NNX and Equinox models."""

from .access import ModelAccess
from .base import UNSET, Binding, ModelKind, bind_model, binding, evaluating, stepping
from .choose import model_kind

__all__ = [
    "UNSET", "Binding", "ModelAccess", "ModelKind", "bind_model", "binding", "evaluating", "model_kind", "stepping",
]
