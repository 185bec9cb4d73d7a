"""A loaded model's inputs: text or token ids to placed ids and mask, with TransformerLens' BOS rule and its text
methods (`to_tokens`, `to_string`, `to_str_tokens`, `to_single_token`).

BOS: TransformerLens prepends one to text unless the model's family says not to (`default_prepend_bos`: False for
GPT-NeoX and Qwen 2/3, as TransformerLens' configs say); every text method takes `prepend_bos=` to override it.
Ids are placed with `jax.device_put` (no compiled program per shape).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from ...errors import UsageError
from .buckets import Padded, pad_batch
from .config import DecoderConfig
from .tokenizer import Tokenizer

__all__ = ["NO_BOS_FAMILIES", "TextInput", "default_prepend_bos", "full_mask", "is_text"]

NO_BOS_FAMILIES = ("gpt_neox", "qwen2", "qwen3")  # TransformerLens' default_prepend_bos=False families


def default_prepend_bos(config: DecoderConfig) -> bool:
    """Whether text gets a BOS by default, as TransformerLens decides for the family."""
    return config.family not in NO_BOS_FAMILIES


def is_text(given: Any) -> bool:
    """A string or a nonempty list/tuple of strings (anything else is read as token ids)."""
    return isinstance(given, str) or (isinstance(given, (list, tuple)) and bool(given) and isinstance(given[0], str))


def _array(given: Any) -> Any:
    """Ids as an array: a JAX array (or tracer) as it is, anything else (lists, NumPy, torch tensors) through NumPy."""
    if isinstance(given, jax.Array):
        return given
    if hasattr(given, "detach") and hasattr(given, "cpu"):  # a torch tensor, read without importing torch
        given = given.detach().cpu().numpy()
    return np.asarray(given)


def _placed(x: Any, dtype: Any) -> jax.Array:
    """`x` as a device array of `dtype`: host arrays placed without a compiled program (a new shape compiles none)."""
    if isinstance(x, jax.Array):
        return x if x.dtype == dtype else x.astype(dtype)
    return jax.device_put(np.asarray(x, dtype))


def full_mask(tokens: jax.Array, mask: jax.Array | None) -> jax.Array:
    """The mask, or every position real when there is none."""
    return jax.device_put(np.ones(tokens.shape, np.int32)) if mask is None else mask


class TextInput:
    """The input side of a loaded model (mixed into Pretrained, which has these attributes)."""

    tokenizer: Tokenizer | None
    config: DecoderConfig
    path: Path
    buckets: bool
    default_prepend_bos: bool

    def _bos(self, prepend_bos: bool | None) -> bool:
        return self.default_prepend_bos if prepend_bos is None else bool(prepend_bos)

    def _padded(self, given: Any, attention_mask: Any, prepend_bos: bool | None = None) -> Padded:
        """Ids and mask of text or ids, padded to their shape bucket (with `buckets`), else as given."""
        tokens, mask = self._ids(given, attention_mask, prepend_bos)
        if not self.buckets:
            full = full_mask(tokens, mask)
            return Padded(tokens, full, full, *tokens.shape)
        return pad_batch(tokens, mask, cap=self.config.n_positions)

    def _ids(self, given: Any, attention_mask: Any,
             prepend_bos: bool | None = None) -> tuple[jax.Array, jax.Array | None]:
        """Token ids [batch, seq] and mask from ids or text (text through the tokenizer, right-padded)."""
        if is_text(given):
            if attention_mask is not None:
                raise UsageError("attention_mask is for token ids; text is tokenized with its own mask")
            given, attention_mask = self._tokenizer("a text input").to_tokens(given, self._bos(prepend_bos))
        tokens = _array(given)
        if tokens.dtype.kind not in "iu" or tokens.ndim not in (1, 2):
            raise UsageError(f"model input: expected a string, a list of strings or integer token ids [batch, seq], "
                             f"got {tokens.dtype} of shape {tokens.shape}")
        tokens = _placed(tokens.reshape(1, -1) if tokens.ndim == 1 else tokens, jnp.int32)
        if attention_mask is None:
            return tokens, None
        mask = _array(attention_mask)
        mask = _placed(mask.reshape(1, -1) if mask.ndim == 1 else mask, jnp.int32)
        if mask.shape != tokens.shape:
            raise UsageError(f"attention_mask of shape {mask.shape} for tokens of shape {tokens.shape}; expected "
                             "the same shape")
        return tokens, mask

    def _tokenizer(self, why: str) -> Tokenizer:
        if self.tokenizer is None:
            raise UsageError(f"{why} needs the checkpoint's tokenizer, and {self.path} has no tokenizer.json (or it "
                             "was loaded with tokenizer=False); pass token ids instead")
        return self.tokenizer

    def to_tokens(self, input: str | list[str], prepend_bos: bool | None = None,
                  padding_side: Literal["left", "right"] | None = None, move_to_device: bool = True,
                  truncate: bool = True, *, return_mask: bool = False) -> Any:
        """Token ids [batch, seq] of a text or texts (right-padded), as TransformerLens' `to_tokens`: a BOS first
        unless `prepend_bos=False` (default: the family's); `return_mask=True` gives (ids, attention_mask)."""
        ids, mask = self._tokenizer("to_tokens").to_tokens(input, self._bos(prepend_bos), padding_side or "right")
        if truncate and self.config.n_positions is not None and ids.shape[1] > self.config.n_positions:
            ids, mask = ids[:, :self.config.n_positions], mask[:, :self.config.n_positions]
        return (ids, mask) if return_mask else ids

    def to_string(self, ids: Any, mask: Any = None) -> str | list[str]:
        """The text of ids, padding dropped (TransformerLens' `to_string`)."""
        return self._tokenizer("to_string").to_string(_array(ids), mask)

    def to_str_tokens(self, input: Any, prepend_bos: bool | None = None) -> list[str] | list[list[str]]:
        """Each token as its own string (TransformerLens' `to_str_tokens`; a BOS first for text, by default)."""
        given = input if isinstance(input, str) else _array(input) if not is_text(input) else input
        return self._tokenizer("to_str_tokens").to_str_tokens(given, self._bos(prepend_bos))

    def to_single_token(self, string: str) -> int:
        """The id of a one-token text (TransformerLens' `to_single_token`)."""
        return self._tokenizer("to_single_token").to_single_token(string)
