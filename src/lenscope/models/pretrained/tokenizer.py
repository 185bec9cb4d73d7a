"""Text to token ids and back with the Hugging Face `tokenizers` package, from a checkpoint's tokenizer.json."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ...errors import UsageError
from ...files import read_json_object
from ...model_libraries import optional
from .config_checks import check_token_ids

__all__ = ["Tokenizer", "load_tokenizer"]


class Tokenizer:
    """`to_tokens` (padded ids and attention mask), `to_string`, `to_str_tokens`, `to_single_token`; BOS handling."""

    def __init__(self, backend: Any, bos_token_id: int | None = None, eos_token_id: int | None = None,
                 pad_token_id: int | None = None) -> None:
        self.backend = backend
        self.bos_token_id, self.eos_token_id = bos_token_id, eos_token_id
        self.pad_token_id = pad_token_id if pad_token_id is not None else (eos_token_id or 0)

    @classmethod
    def from_file(cls, path: str | Path, **ids: int | None) -> Tokenizer:
        """A Tokenizer from a tokenizer.json file."""
        backend = optional("tokenizers", "pretrained", "reading tokenizer.json")  # only text jobs need it
        try:
            loaded = backend.Tokenizer.from_file(str(path))
        except Exception as err:  # the tokenizers package raises a bare Exception for a file it cannot read
            raise UsageError(f"{path} is not a tokenizer file the tokenizers package reads ({str(err)[:200]}); "
                             "expected a Hugging Face tokenizer.json") from None
        return cls(loaded, **ids)

    def encode(self, text: str, prepend_bos: bool | None = None) -> list[int]:
        """Token ids of one text: the tokenizer's own special tokens, and a BOS first when `prepend_bos`."""
        ids = list(self.backend.encode(text, add_special_tokens=prepend_bos is not False).ids)
        if prepend_bos and self.bos_token_id is not None and (not ids or ids[0] != self.bos_token_id):
            ids.insert(0, self.bos_token_id)
        if prepend_bos is False and ids and ids[0] == self.bos_token_id:
            ids = ids[1:]
        return ids

    def to_tokens(self, texts: str | Sequence[str], prepend_bos: bool | None = None,
                  padding_side: Literal["left", "right"] = "right") -> tuple[np.ndarray, np.ndarray]:
        """(ids [batch, seq] int32, attention_mask [batch, seq] int32) of one text or several, padded to the longest."""
        if padding_side not in ("left", "right"):
            raise UsageError(f"padding_side={padding_side!r}: expected 'left' or 'right'")
        rows = [self.encode(t, prepend_bos) for t in ([texts] if isinstance(texts, str) else texts)]
        width = max(len(r) for r in rows)
        ids = np.full((len(rows), width), self.pad_token_id, np.int32)
        mask = np.zeros((len(rows), width), np.int32)
        for i, row in enumerate(rows):
            span = slice(width - len(row), width) if padding_side == "left" else slice(0, len(row))
            ids[i, span], mask[i, span] = row, 1
        return ids, mask

    def to_string(self, ids: Any, mask: Any = None, skip_special_tokens: bool = False) -> str | list[str]:
        """The text of ids [seq] (a string) or [batch, seq] (a list of strings), padding dropped.

        With `mask` (to_tokens' attention mask) exactly the masked-out positions are dropped; without it the
        runs of the pad id at either end of a row, unless the pad id is also the BOS or EOS (then give `mask`).
        """
        array = np.asarray(ids)
        if array.ndim not in (1, 2):
            raise UsageError(f"to_string: ids of shape {array.shape}; expected [seq] or [batch, seq]")
        keep = self._kept(array, mask)
        rows = [self.backend.decode(row[k].tolist(), skip_special_tokens=skip_special_tokens)
                for row, k in zip(np.atleast_2d(array), np.atleast_2d(keep), strict=True)]
        return rows[0] if array.ndim == 1 else rows

    def _kept(self, array: np.ndarray, mask: Any) -> np.ndarray:
        """Which positions of `array` are text: `mask` as given, else all but the pad runs at the ends of a row."""
        if mask is not None:
            keep = np.asarray(mask).astype(bool)
            if keep.shape != array.shape:
                raise UsageError(f"to_string: mask of shape {keep.shape} for ids of shape {array.shape}; expected "
                                 "the same shape (to_tokens' attention mask)")
            return keep
        if self.pad_token_id in (self.bos_token_id, self.eos_token_id):
            return np.ones(array.shape, bool)
        pad = array == self.pad_token_id
        leading = np.cumprod(pad, axis=-1).astype(bool)
        trailing = np.flip(np.cumprod(np.flip(pad, axis=-1), axis=-1), axis=-1).astype(bool)
        return ~(leading | trailing)

    def to_str_tokens(self, text_or_ids: str | Any, prepend_bos: bool | None = None) -> list[str] | list[list[str]]:
        """Each token as its own string (`' cat'`, not `'Ġcat'`): of a text, of ids [seq], or of ids [batch, seq]."""
        if isinstance(text_or_ids, str):
            array = np.asarray(self.encode(text_or_ids, prepend_bos))
        else:
            array = np.asarray(text_or_ids)
        if array.ndim not in (1, 2) or array.dtype.kind not in "iu":
            raise UsageError(f"to_str_tokens: expected a string or integer ids [seq] or [batch, seq], got "
                             f"{array.dtype} of shape {array.shape}")
        rows = [[self.backend.decode([int(i)], skip_special_tokens=False) for i in row] for row in np.atleast_2d(array)]
        return rows[0] if array.ndim == 1 else rows

    def to_single_token(self, text: str) -> int:
        """The id of `text` when it is exactly one token (no BOS); a UsageError showing its tokens otherwise."""
        ids = self.encode(text, prepend_bos=False)
        if len(ids) != 1:
            pieces = [self.backend.decode([i], skip_special_tokens=False) for i in ids]
            raise UsageError(f"to_single_token: {text!r} is {len(ids)} tokens {pieces!r}, not one; pass one of "
                             "them, or use to_tokens for several")
        return ids[0]


def load_tokenizer(folder: Path, config: dict[str, Any]) -> Tokenizer | None:
    """The folder's tokenizer.json as a Tokenizer (ids from config.json and tokenizer_config.json), or None."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    ids = {k: config.get(k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    extra = folder / "tokenizer_config.json"
    if extra.is_file():
        settings = read_json_object(extra)
        backend_ids = Tokenizer.from_file(path)
        for key in ("bos", "eos", "pad"):
            token = settings.get(f"{key}_token")
            token = token.get("content") if isinstance(token, dict) else token
            if token is not None and ids.get(f"{key}_token_id") is None:
                ids[f"{key}_token_id"] = backend_ids.backend.token_to_id(token)
    ids = {k: (v if isinstance(v, int) and not isinstance(v, bool) else None) for k, v in ids.items()}
    tokenizer = Tokenizer.from_file(path, **ids)
    check_token_ids(ids, max(tokenizer.backend.get_vocab_size(), 1), f"{folder} (config.json, tokenizer_config.json)")
    return tokenizer
