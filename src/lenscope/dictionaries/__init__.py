"""Sparse dictionaries (SAEs and transcoders): architectures, losses, training on captured activations,
SAELens' evaluations and file format (docs/dictionaries.md)."""

from .core import ARCHITECTURES, Dictionary, Spec, init_params, scatter
from .losses import LossConfig, batch_topk, jumprelu, loss, step

__all__ = ["ARCHITECTURES", "Dictionary", "LossConfig", "Spec", "batch_topk", "init_params", "jumprelu", "loss",
           "scatter", "step"]
