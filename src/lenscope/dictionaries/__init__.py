"""Sparse dictionaries (SAEs and transcoders): architectures, losses, training on captured activations,
SAELens' evaluations and file format (docs/dictionaries.md)."""

from .activations import Activations, cached_activations, capture_sites
from .buffer import mixing_buffer, parquet_chunks
from .config import SaeConfig
from .core import ARCHITECTURES, Dictionary, Spec, init_params, scatter
from .features import Attached, Site, attach, run_with_features
from .losses import LossConfig, batch_topk, jumprelu, loss, step
from .saelens_format import load_saelens, saelens_architecture, save_saelens
from .trainer import SaeTrainer

__all__ = ["ARCHITECTURES", "Activations", "Attached", "Dictionary", "LossConfig", "SaeConfig", "SaeTrainer", "Site",
           "Spec", "attach", "batch_topk", "cached_activations", "capture_sites", "init_params", "jumprelu",
           "load_saelens", "loss", "mixing_buffer", "parquet_chunks", "run_with_features", "saelens_architecture",
           "save_saelens", "scatter", "step"]
