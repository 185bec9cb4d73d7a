"""The reference models in Flax NNX: the linen Transformer and MLPClassifier, same architecture and parameters."""

from .mlp import MLPClassifier
from .transformer import MLP, Attention, Block, Transformer

__all__ = ["MLP", "Attention", "Block", "MLPClassifier", "Transformer"]
