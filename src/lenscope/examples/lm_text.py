"""Local text for language-model jobs: .txt, .jsonl and .parquet files, tokenized, then packed or padded.

Packed: documents joined with an end-of-text token and cut into rows of seq_len + 1 tokens (no padding).
Padded: one document per row, truncated to seq_len + 1 tokens and right-padded (attention_mask 0).
Each row becomes `inputs` [seq_len], `targets` (the next tokens), `attention_mask`, `target_mask`, and
`labels`: the token after the last input, the answer the patching ops score at position -1.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..errors import ConfigError

__all__ = ["SUFFIXES", "read_file", "read_texts", "text_files", "token_rows"]

SUFFIXES = (".txt", ".jsonl", ".parquet")


def text_files(path: str | Path) -> list[Path]:
    """The text files `data/text` names: the file itself, or a folder's files with a known suffix, sorted."""
    root = Path(path).expanduser()
    if root.is_dir():
        files = sorted(p for p in root.rglob("*") if p.suffix in SUFFIXES)
        if not files:
            raise ConfigError(f"data/text={str(path)!r} is a folder with no {', '.join(SUFFIXES)} files")
        return files
    if not root.is_file():
        raise ConfigError(f"data/text={str(path)!r}: no such file or folder; expected a {', '.join(SUFFIXES)} "
                          "file or a folder of them")
    if root.suffix not in SUFFIXES:
        raise ConfigError(f"data/text={str(path)!r}: unknown suffix {root.suffix!r}; expected one of "
                          f"{', '.join(SUFFIXES)}")
    return [root]


def _column(rows: Sequence[Any], key: str, where: Path) -> list[str]:
    texts = []
    for i, row in enumerate(rows):
        value = row.get(key) if isinstance(row, dict) else None
        if not isinstance(value, str):
            found = ", ".join(sorted(row)) if isinstance(row, dict) else type(row).__name__
            raise ConfigError(f"{where} record {i} has no string field {key!r} (data/text_key); it has: {found}")
        texts.append(value)
    return texts


def read_file(file: Path, key: str = "text") -> list[str]:
    """The documents of one file: a .txt file's non-empty lines, a .jsonl or .parquet column `key` (maybe none)."""
    if file.suffix == ".txt":
        return [line for line in _text(file).splitlines() if line.strip()]
    if file.suffix == ".jsonl":
        return _column(_records(file), key, file)
    return _column([{key: v} for v in _parquet(file, key)], key, file)


def read_texts(path: str | Path, key: str = "text") -> list[str]:
    """The documents of a file or folder (`read_file` of each); ConfigError when there are none."""
    texts = [text for file in text_files(path) for text in read_file(file, key)]
    if not texts:
        raise ConfigError(f"data/text={str(path)!r} holds no text")
    return texts


def _text(file: Path) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{file} is not UTF-8 text (byte {err.start}: {err.reason}); data/text reads UTF-8 "
                          ".txt, .jsonl and .parquet files") from None


def _records(file: Path) -> list[Any]:
    """The JSON value of each non-empty line of a .jsonl file; ConfigError naming a line that is not JSON."""
    records = []
    for number, line in enumerate(_text(file).splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except (ValueError, RecursionError) as err:  # not JSON, or nested too deep to parse
                raise ConfigError(f"{file} line {number} is not a JSON record ({str(err)[:120]}); expected one "
                                  "JSON object per line, e.g. {\"text\": \"...\"}") from None
    return records


def _parquet(file: Path, key: str) -> list[Any]:
    """Column `key` of a Parquet file; ConfigError naming the file when it is no Parquet file or lacks the column."""
    import pyarrow as pa  # lazy: pyarrow is heavy and only parquet input needs it
    import pyarrow.parquet as pq  # lazy: as above

    try:
        table = pq.read_table(file)
    except (pa.ArrowException, OSError) as err:  # pyarrow's errors for a damaged or foreign file
        raise ConfigError(f"{file} is not a readable Parquet file ({str(err)[:160]})") from None
    if key not in table.column_names:
        raise ConfigError(f"{file} has no column {key!r} (data/text_key); columns: {', '.join(table.column_names)}")
    return table.column(key).to_pylist()


def token_rows(documents: Sequence[Sequence[int]], seq_len: int, mode: Literal["packed", "padded"], *,
               eos: int, pad: int) -> dict[str, np.ndarray]:
    """Rows of seq_len + 1 tokens as the arrays an LM batch holds (see the module docstring)."""
    width = seq_len + 1
    if mode == "packed":
        stream = np.asarray([t for doc in documents for t in (*doc, eos)], np.int32)
        count = len(stream) // width
        if count == 0:
            raise ConfigError(f"the text has {len(stream)} tokens, fewer than one row of data/seq_len + 1 = {width}")
        rows, mask = stream[: count * width].reshape(count, width), np.ones((count, width), np.int32)
    elif mode == "padded":
        rows, mask = np.full((len(documents), width), pad, np.int32), np.zeros((len(documents), width), np.int32)
        for i, doc in enumerate(documents):
            kept = list(doc)[:width]
            rows[i, : len(kept)], mask[i, : len(kept)] = kept, 1
    else:
        raise ConfigError(f"data/packing={mode!r}: expected 'packed' or 'padded'")
    return {"inputs": rows[:, :-1], "targets": rows[:, 1:], "attention_mask": mask[:, :-1],
            "target_mask": mask[:, 1:] * mask[:, :-1], "labels": rows[:, -1]}
