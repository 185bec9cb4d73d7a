"""Pretrained: a loaded checkpoint, callable on token ids, with its model, params, tokenizer and config."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from .config import DecoderConfig
from .decoder import Decoder
from .load import Shardings, leaf_path, load_decoder
from .locate import locate
from .tokenizer import Tokenizer, load_tokenizer

__all__ = ["Pretrained", "from_pretrained"]


@eqx.filter_jit
def _forward(model: Decoder, tokens: jax.Array, attention_mask: jax.Array | None) -> jax.Array:
    return model(tokens, attention_mask)


@dataclass
class Pretrained:
    """A checkpoint loaded into the generic Decoder: `pretrained(tokens, attention_mask=None)` gives logits."""

    model: Decoder
    config: DecoderConfig
    tokenizer: Tokenizer | None
    path: Path
    hf_config: dict[str, Any] = field(repr=False)
    checkpoint_bytes: int = 0

    def __call__(self, tokens: Any, attention_mask: Any = None) -> jax.Array:
        """Logits [batch, seq, vocab] of token ids [batch, seq] (one compiled program per shape)."""
        tokens = jnp.asarray(tokens, jnp.int32)
        mask = None if attention_mask is None else jnp.asarray(attention_mask, jnp.int32)
        return _forward(self.model, tokens, mask)

    @property
    def params(self) -> dict[str, Any]:
        """The model's arrays as nested dicts by path (`blocks/0/attn/query/kernel`), as a trainer holds them."""
        nested: dict[str, Any] = {}
        for keys, leaf in jax.tree_util.tree_flatten_with_path(eqx.filter(self.model, eqx.is_array))[0]:
            *parents, last = leaf_path(keys).split("/")
            node = nested
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = leaf
        return nested


def from_pretrained(path: str | os.PathLike, dtype: Any = jnp.float32, mesh: Mesh | None = None, *,
                    shardings: Shardings | None = None, tokenizer: bool = True) -> Pretrained:
    """Load a local Hugging Face folder (or a repo id in the local HF cache) into the generic Decoder.

    `dtype` is the floating-point type of every weight (float32, bfloat16); with `mesh`, each matrix is
    split over the mesh's devices as it is read (or as `shardings(path, shape)` says).
    """
    folder = locate(path)
    model, cfg, raw, size = load_decoder(folder, dtype, mesh, shardings)
    tok = load_tokenizer(folder, raw) if tokenizer else None
    return Pretrained(model, cfg, tok, folder, raw, size)
