"""Local text for language-model jobs: .txt, .jsonl and .parquet files, tokenized, then packed or padded.

Files are read in bounded pieces, whatever their size: a .txt file a block at a time and a line longer than
CHUNK_CHARS in pieces cut before a space, a .jsonl file a line at a time (at most MAX_RECORD_CHARS a line), a
.parquet column a batch at a time (lenscope.store.parquet_reader). `encode_stream` tokenizes piece by piece into one
int32 array and refuses a text past its token budget before holding more: memory is bounded by a piece and the budget.

Packed: documents joined with an end-of-text token and cut into rows of seq_len + 1 tokens (no padding).
Padded: one document per row, truncated to seq_len + 1 tokens and right-padded (attention_mask 0).
Each row becomes `inputs` [seq_len], `targets` (the next tokens), `attention_mask`, `target_mask`, and
`labels`: the token after the last input, the answer the patching ops score at position -1.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..errors import ConfigError
from ..store.parquet_reader import ParquetError, batches, open_parquet

__all__ = ["CHUNK_CHARS", "MAX_TOKENS", "SUFFIXES", "encode_stream", "pieces", "read_file", "read_texts",
           "stream_rows", "text_files", "token_rows"]

SUFFIXES = (".txt", ".jsonl", ".parquet")
CHUNK_CHARS = 1 << 20  # the longest piece of text read or tokenized at once
MAX_RECORD_CHARS = 64 << 20  # the longest .jsonl line (one JSON record is parsed whole)
MAX_TOKENS = 1 << 25  # tokens (or padded row cells) of data/text held at most, unless data/max_tokens says otherwise
Piece = tuple[str, bool]  # a piece of a document's text, and whether it ends the document


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


MAX_CORPUS_CHARS = 1 << 28  # characters of text a corpus read whole (a BPE trained on it) may hold


def read_file(file: Path, key: str = "text", max_chars: int = MAX_CORPUS_CHARS) -> list[str]:
    """The documents of one file: a .txt file's non-empty lines, a .jsonl or .parquet column `key` (maybe none);
    a ConfigError naming the file once they pass `max_chars` characters, before more is held."""
    documents, current, held = [], [], 0
    for text, last in _file_pieces(file, key):
        held += len(text)
        if held > max_chars:
            raise ConfigError(f"{file}: data/text holds more than {max_chars} characters, more than a corpus read "
                              "whole is held in memory; give less text (data/max_documents stops reading there)")
        current.append(text)
        if last:
            document, current = "".join(current), []
            if file.suffix != ".txt" or document.strip():
                documents.append(document)
    return documents


def read_texts(path: str | Path, key: str = "text") -> list[str]:
    """The documents of a file or folder (`read_file` of each); ConfigError when there are none."""
    texts = [text for file in text_files(path) for text in read_file(file, key)]
    if not texts:
        raise ConfigError(f"data/text={str(path)!r} holds no text")
    return texts


def pieces(path: str | Path, key: str = "text") -> Iterator[Piece]:
    """The documents of a file or folder as pieces of at most CHUNK_CHARS characters, each with whether it ends
    its document (a .txt file's blank lines are no documents)."""
    for file in text_files(path):
        yield from _file_pieces(file, key)


def _file_pieces(file: Path, key: str) -> Iterator[Piece]:
    if file.suffix == ".txt":
        yield from _txt_pieces(file)
    elif file.suffix == ".jsonl":
        for index, (_, record) in enumerate(_records(file)):
            yield from _cut(_field(record, key, file, f"record {index}"))
    else:
        yield from _parquet_pieces(file, key)


def _cut(text: str) -> Iterator[Piece]:
    """`text` in pieces of at most CHUNK_CHARS, each cut before a space where one lies in its second half (a
    byte-level BPE attaches a space to the word after it, so the pieces tokenize as the whole does)."""
    while len(text) > CHUNK_CHARS:
        at = text.rfind(" ", CHUNK_CHARS // 2, CHUNK_CHARS)
        at = at if at > 0 else CHUNK_CHARS
        yield text[:at], False
        text = text[at:]
    yield text, True


def _txt_pieces(file: Path) -> Iterator[Piece]:
    """A .txt file's non-empty lines (str.splitlines' separators), read a block at a time."""
    buffer, open_line = "", False  # open_line: pieces of the current line were given already
    try:
        with open(file, encoding="utf-8", newline="") as handle:
            while True:
                block = handle.read(CHUNK_CHARS)
                buffer += block
                lines = buffer.splitlines(keepends=True)
                complete = lines if not block else [line for line in lines if line.splitlines()[0] != line]
                rest = "".join(lines[len(complete):])
                for line in complete:
                    text = line.splitlines()[0]
                    if open_line or text.strip():
                        yield from _cut(text)
                    open_line = False
                buffer = rest
                while len(buffer) > CHUNK_CHARS:  # a line longer than a piece: given in pieces
                    piece, last = next(_cut(buffer))
                    yield piece, False
                    buffer, open_line = buffer[len(piece):], True
                if not block:
                    return
    except UnicodeDecodeError as err:
        raise ConfigError(f"{file} is not UTF-8 text (byte {err.start}: {err.reason}); data/text reads UTF-8 "
                          ".txt, .jsonl and .parquet files") from None


def _field(row: Any, key: str, where: Path, what: str) -> str:
    value = row.get(key) if isinstance(row, dict) else None
    if not isinstance(value, str):
        found = ", ".join(sorted(map(str, row))) if isinstance(row, dict) else type(row).__name__
        raise ConfigError(f"{where} {what} has no string field {key!r} (data/text_key); it has: {found}")
    return value


def _records(file: Path) -> Iterator[tuple[int, Any]]:
    """(line number, JSON value) of each non-empty line of a .jsonl file, a line at a time; ConfigError naming a line
    that is not JSON or longer than MAX_RECORD_CHARS."""
    try:
        with open(file, encoding="utf-8") as handle:
            for number in range(1, 1 << 62):
                line = handle.readline(MAX_RECORD_CHARS + 1)
                if not line:
                    return
                if len(line) > MAX_RECORD_CHARS:
                    raise ConfigError(f"{file} line {number} is longer than {MAX_RECORD_CHARS} characters; a .jsonl "
                                      "record is parsed whole: split it into several records")
                if line.strip():
                    try:
                        yield number, json.loads(line)
                    except (ValueError, RecursionError) as err:  # not JSON, or nested too deep to parse
                        raise ConfigError(f"{file} line {number} is not a JSON record ({str(err)[:120]}); expected "
                                          "one JSON object per line, e.g. {\"text\": \"...\"}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{file} is not UTF-8 text (byte {err.start}: {err.reason}); data/text reads UTF-8 "
                          ".txt, .jsonl and .parquet files") from None


def _parquet_pieces(file: Path, key: str) -> Iterator[Piece]:
    """Column `key` of a Parquet file a batch at a time; ConfigError naming the file when it is no Parquet file,
    lacks the column or holds a batch past the reader's bound."""
    try:
        parquet = open_parquet(file, str(file))
        names = parquet.schema_arrow.names
        if key not in names:
            raise ConfigError(f"{file} has no column {key!r} (data/text_key); columns: {', '.join(names)}")
        row = 0
        for batch in batches(parquet, str(file), columns=[key], kept=False, batch_rows=256):
            for value in batch.column(0).to_pylist():
                yield from _cut(_field({key: value}, key, file, f"record {row}"))
                row += 1
    except ParquetError as err:
        raise ConfigError(str(err)) from None


def encode_stream(encode: Callable[[str, bool], list[int]], source: Iterator[Piece], eos: int, *,
                  max_documents: int = 0, max_tokens: int = MAX_TOKENS, what: str = "data/text",
                  refuse: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(token stream, document starts): every document's tokens followed by `eos`, tokenized a piece at a time
    (`encode(piece, first)`: `first` is whether the piece begins its document) into one int32 array; `starts` holds
    each document's offset and the stream's length. Past `max_tokens`, a ConfigError (`refuse`) before more is held,
    else the stream ends there."""
    chunks: list[np.ndarray] = []
    starts, total, first = [0], 0, True
    for text, last in source:
        ids = np.asarray(encode(text, first) if text else [], np.int32)
        ids = np.append(ids, np.int32(eos)) if last else ids
        if total + len(ids) > max_tokens:
            if refuse:
                raise ConfigError(f"{what} holds more than {max_tokens} tokens, more than is held in memory (4 bytes "
                                  "a token); set data/max_tokens=N to train on its first N tokens, or data/"
                                  "max_documents")
            ids = ids[: max_tokens - total]
        chunks.append(ids)
        total += len(ids)
        first = last
        if last:
            starts.append(total)
        if total >= max_tokens or (last and max_documents and len(starts) > max_documents):
            break
    if starts[-1] != total:
        starts.append(total)
    return (np.concatenate(chunks) if chunks else np.zeros(0, np.int32)), np.asarray(starts, np.int64)


def stream_rows(stream: np.ndarray, starts: np.ndarray, seq_len: int, mode: Literal["packed", "padded"], *,
                pad: int) -> dict[str, np.ndarray]:
    """`token_rows` of a token stream (documents each followed by their EOS, at `starts`), without a Python list
    per token: packed rows are views of the stream and their masks one broadcast row."""
    width = seq_len + 1
    if mode == "packed":
        count = len(stream) // width
        if count == 0:
            raise ConfigError(f"the text has {len(stream)} tokens, fewer than one row of data/seq_len + 1 = {width}")
        rows = stream[: count * width].reshape(count, width)
        mask = np.broadcast_to(np.ones(width, np.int32), (count, width))
        return {"inputs": rows[:, :-1], "targets": rows[:, 1:], "attention_mask": mask[:, :-1],
                "target_mask": mask[:, 1:], "labels": rows[:, -1]}
    documents = [stream[a:b - 1] for a, b in zip(starts[:-1], starts[1:])]  # views, without their EOS
    return token_rows(documents, seq_len, mode, eos=0, pad=pad)


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
