"""Reference models: a decoder-only transformer and an MLP classifier in Flax linen, Flax NNX and Equinox.

The linen models are here (`lenscope.models.Transformer`); their NNX and Equinox versions, with the
same architecture and parameter names, are `lenscope.models.nnx` and `lenscope.models.equinox`, and
`lenscope.models.convert` moves weights between them. Those three import flax.nnx and equinox, so they load
on first access (`lenscope.models.nnx`, `from lenscope.models import nnx`), not for a linen job.
`lenscope.models.pretrained` is the generic decoder of Hugging Face checkpoints (docs/pretrained.md), also lazy.
"""

import importlib
from types import ModuleType

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
    "pretrained",
]

_LAZY = ("convert", "equinox", "nnx", "pretrained")


def __getattr__(name: str) -> ModuleType:
    """The NNX, Equinox, conversion and pretrained submodules, imported on first access."""
    if name not in _LAZY:
        raise AttributeError(f"module 'lenscope.models' has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{name}")
