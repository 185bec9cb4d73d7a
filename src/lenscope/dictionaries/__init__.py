"""Sparse dictionaries (SAEs and transcoders): architectures, losses, training on captured activations,
SAELens' evaluations and file format (docs/dictionaries.md)."""

from .core import ARCHITECTURES, Dictionary, Spec, init_params, scatter
from .losses import LossConfig, batch_topk, jumprelu, loss, step
from .saelens_format import load_saelens, saelens_architecture, save_saelens

__all__ = ["ARCHITECTURES", "Dictionary", "LossConfig", "Spec", "batch_topk", "init_params", "jumprelu",
           "load_saelens", "loss", "save_saelens", "saelens_architecture", "scatter", "step"]
