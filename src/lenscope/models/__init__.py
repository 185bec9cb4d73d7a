"""Reference models: a decoder-only transformer and an MLP classifier in Flax linen, Flax NNX and Equinox.

The linen models are here (`lenscope.models.Transformer`); their NNX and Equinox versions, with the
same architecture and parameter names, are `lenscope.models.nnx` and `lenscope.models.equinox`, and
`lenscope.models.convert` moves weights between them. Those three import flax.nnx and equinox, so they load
on first access (`lenscope.models.nnx`, `from lenscope.models import nnx`), not for a linen job.
`lenscope.models.pretrained` is the generic decoder of Hugging Face checkpoints (docs/pretrained.md), also lazy;
`lenscope.models.from_pretrained(path)` loads one (defined there, imported on first access).
"""

import importlib
from typing import Any

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
    "from_pretrained",
    "from_pretrained_no_processing",
    "nnx",
    "pretrained",
]

_LAZY = ("convert", "equinox", "nnx", "pretrained")


def __getattr__(name: str) -> Any:
    """The NNX, Equinox, conversion and pretrained submodules, and `from_pretrained`, imported on first access."""
    if name in ("from_pretrained", "from_pretrained_no_processing"):
        return getattr(importlib.import_module(f"{__name__}.pretrained"), name)
    if name not in _LAZY:
        raise AttributeError(f"module 'lenscope.models' has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{name}")
