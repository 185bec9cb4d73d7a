"""A streaming shuffle buffer for activations larger than memory, as SAELens' mixing buffer works.

`mixing_buffer` reads a stream of chunks (each a {column: [rows, ...]} mapping of NumPy arrays, or one array)
into a buffer; whenever it holds `buffer_size` rows it shuffles them, serves all but `mix_fraction` of the
buffer as batches and keeps the rest to mix with the next chunks. At the end of the stream the rows still
held are shuffled and served too, so one pass over the stream (an epoch) emits every row exactly once;
at most `buffer_size` plus one chunk of rows are held at a time. `parquet_chunks` streams the record
batches of an activations Parquet file (`to_parquet`'s layout) without reading the whole file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, BinaryIO

import numpy as np

from ..errors import UsageError

Columns = dict[str, np.ndarray]


def _columns(chunk: Mapping[str, Any] | np.ndarray) -> Columns:
    """A chunk as {column: array} with one row count (a bare array is the column `inputs`)."""
    columns = {"inputs": np.asarray(chunk)} if isinstance(chunk, np.ndarray) else {k: np.asarray(v)
                                                                                   for k, v in chunk.items()}
    rows = {k: v.shape[0] if v.ndim else None for k, v in columns.items()}
    if not columns or len(set(rows.values())) != 1 or None in rows.values():
        raise UsageError(f"a chunk of activations must be arrays with one leading row count; got rows {rows}")
    return columns


def _take(columns: Columns, index: Any) -> Columns:
    return {k: v[index] for k, v in columns.items()}


def _rows(columns: Columns) -> int:
    return len(next(iter(columns.values())))


def _serve(columns: Columns, batch_size: int, count: int) -> Iterator[Columns]:
    for start in range(0, count, batch_size):
        yield _take(columns, slice(start, min(start + batch_size, count)))


def mixing_buffer(chunks: Iterable[Mapping[str, Any] | np.ndarray], buffer_size: int, batch_size: int, *,
                  seed: int = 0, mix_fraction: float = 0.5, drop_last: bool = False) -> Iterator[Columns]:
    """Shuffled batches of `batch_size` rows from a stream of chunks, holding at most `buffer_size` + a chunk.

    `seed` fixes the shuffles (give each epoch its own); `mix_fraction` of the buffer stays behind to mix
    with later chunks (0: no shuffling); the last batch may be short unless `drop_last`.
    """
    if batch_size < 1 or buffer_size < batch_size:
        raise UsageError(f"mixing_buffer needs 1 <= batch_size <= buffer_size, got batch_size={batch_size}, "
                         f"buffer_size={buffer_size}")
    if not 0 <= mix_fraction < 1:
        raise UsageError(f"mix_fraction must be in [0, 1), got {mix_fraction}")
    rng = np.random.default_rng(seed)
    keep = int(buffer_size * mix_fraction)
    held: Columns | None = None
    for chunk in chunks:
        chunk = _columns(chunk)
        if held is not None and held.keys() != chunk.keys():
            raise UsageError(f"chunks differ in columns: {sorted(held)} then {sorted(chunk)}")
        held = chunk if held is None else {k: np.concatenate([held[k], chunk[k]]) for k in chunk}
        rows = _rows(held)
        if rows < buffer_size:
            continue
        if mix_fraction > 0:
            held = _take(held, rng.permutation(rows))
        served = max(1, (rows - keep) // batch_size) * batch_size
        yield from _serve(held, batch_size, served)
        held = {k: v[served:].copy() for k, v in held.items()}  # a copy: the served rows' memory is released
    if held is None or _rows(held) == 0:
        return
    if mix_fraction > 0:
        held = _take(held, rng.permutation(_rows(held)))
    rows = _rows(held)
    yield from _serve(held, batch_size, rows - rows % batch_size if drop_last else rows)


def parquet_chunks(source: str | os.PathLike | BinaryIO, rows: int = 65536,
                   columns: list[str] | None = None) -> Iterator[Columns]:
    """The record batches (about `rows` rows each) of an activations Parquet file as {column: array}, lazily."""
    import pyarrow.parquet as pq  # lazy: pyarrow is needed only when activations are streamed from Parquet

    for batch in pq.ParquetFile(source).iter_batches(batch_size=rows, columns=columns):
        out = {}
        for name, column in zip(batch.schema.names, batch.columns):
            if hasattr(column.type, "list_size"):  # a site: [rows, d] stored as a fixed-size list
                out[name] = column.flatten().to_numpy().reshape(len(column), column.type.list_size)
            else:
                out[name] = column.to_numpy()
        yield out
