"""Sparse dictionaries (SAEs, transcoders and crosscoders): architectures, losses, training on captured activations,
SAELens' evaluations and file format, features matched across checkpoints (docs/dictionaries.md)."""

from .activations import Activations, cached_activations, capture_sites
from .buffer import mixing_buffer, parquet_chunks
from .config import CrosscoderConfig, SaeConfig
from .core import ARCHITECTURES, Dictionary, Spec, init_params, scatter
from .crosscoder import CrosscoderTrainer
from .crosscoder_records import decoder_shares
from .features import Attached, Site, attach, run_with_features
from .losses import LossConfig, batch_topk, jumprelu, loss, step
from .matching import Track, feature_tracks, match_decoders
from .sae_object import SAE, SaeCfg
from .saelens_format import from_saelens, load_saelens, saelens_architecture, save_saelens
from .trainer import SaeTrainer

__all__ = ["ARCHITECTURES", "SAE", "Activations", "Attached", "CrosscoderConfig", "CrosscoderTrainer", "Dictionary",
           "LossConfig", "SaeCfg", "SaeConfig", "SaeTrainer", "Site", "Spec", "Track", "attach", "batch_topk",
           "cached_activations", "capture_sites", "decoder_shares", "feature_tracks", "from_saelens", "init_params",
           "jumprelu",
           "load_saelens", "loss", "match_decoders", "mixing_buffer", "parquet_chunks", "run_with_features",
           "saelens_architecture", "save_saelens", "scatter", "step"]
