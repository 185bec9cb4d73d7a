"""Reference models: a decoder-only transformer and an MLP classifier in Flax linen, Flax NNX and Equinox.

The linen models are here (`lenscope.models.Transformer`); their NNX and Equinox versions, with the
same architecture and parameter names, are `lenscope.models.nnx` and `lenscope.models.equinox`, and
`lenscope.models.convert` moves weights between them.
"""

from lenscope.models import convert, equinox, nnx
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
    "convert",
    "equinox",
    "nnx",
]
