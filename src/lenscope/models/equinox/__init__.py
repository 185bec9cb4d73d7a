"""The reference models in Equinox: the linen Transformer and MLPClassifier, same architecture and parameters."""

from .layers import Dense, Embed, LayerNorm
from .mlp import MLPClassifier
from .transformer import MLP, Attention, Block, Transformer

__all__ = ["MLP", "Attention", "Block", "Dense", "Embed", "LayerNorm", "MLPClassifier", "Transformer"]
