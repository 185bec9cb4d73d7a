"""Small reference Flax linen models: a decoder-only transformer and an MLP classifier."""

from lenscope.models.mlp import MLPClassifier
from lenscope.models.transformer import (
    MLP,
    Attention,
    Block,
    Transformer,
    attention_pattern,
    causal_mask,
)

__all__ = [
    "MLP",
    "Attention",
    "Block",
    "MLPClassifier",
    "Transformer",
    "attention_pattern",
    "causal_mask",
]
