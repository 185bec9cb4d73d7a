"""The one bounded reader of Parquet files lenscope did not just write (a stored table a page shows, a corpus).

A Parquet file's size says little about its content: a 1 MiB file can hold 50 million rows. So every read is checked
against its footer before anything is decoded (the rows, and each column chunk's decoded size: at least 8 bytes a
value, or its uncompressed pages when larger), then decoded in batches whose Arrow bytes are counted as they come,
so a footer that understates its content is caught after one batch too. A refused read is a TableTooLarge naming
the file, what it holds and the bound; a damaged file a ParquetError.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["BATCH_ROWS", "MAX_BYTES", "MAX_GROUP_ROWS", "MAX_ROWS", "ParquetError", "TableTooLarge", "batches",
           "check_rows", "open_parquet", "read_rows", "read_table"]

MAX_ROWS = 1 << 20  # rows a whole-table read may decode
MAX_BYTES = 64 << 20  # decoded (Arrow) bytes a read may hold
MAX_GROUP_ROWS = 4 << 20  # rows of one row group a page may read through to reach its rows
BATCH_ROWS = 1024  # rows decoded at a time
VALUE_BYTES = 8  # the least a decoded value is counted at (a number, or a string's offset and a few bytes)


class ParquetError(ValueError):
    """A stored table that cannot be read as Parquet."""


class TableTooLarge(ParquetError):
    """A Parquet file whose content exceeds what a read may decode."""


Source = bytes | Path | str


def open_parquet(source: Source, what: str = "the table") -> Any:
    """A pyarrow ParquetFile over bytes or a path: its footer read, nothing decoded; a ParquetError naming `what`."""
    import pyarrow.parquet as pq  # lazy: pyarrow takes ~0.2 s to import and only tables need it

    try:
        return pq.ParquetFile(io.BytesIO(source) if isinstance(source, bytes) else str(source))
    except Exception as error:  # pyarrow raises several types for a damaged file
        raise ParquetError(f"{what} is not a readable Parquet file: {error}") from None


def _decoded_bytes(parquet: Any, groups: Sequence[int], columns: Sequence[str] | None) -> int:
    """The least the `columns` (None: all) of row `groups` take decoded, by the footer."""
    wanted = None if columns is None else set(columns)
    total = 0
    for index in groups:
        group = parquet.metadata.row_group(index)
        for j in range(group.num_columns):
            chunk = group.column(j)
            if wanted is None or chunk.path_in_schema.split(".")[0] in wanted:
                total += max(chunk.total_uncompressed_size, chunk.num_values * VALUE_BYTES)
    return total


def _size(count: int) -> str:
    return f"{count / (1 << 20):.1f} MiB" if count >= 1 << 20 else f"{count} bytes"


def check_rows(parquet: Any, what: str, *, max_rows: int = MAX_ROWS, max_bytes: int = MAX_BYTES,
               columns: Sequence[str] | None = None) -> None:
    """Refuse (TableTooLarge) a whole read of `columns` of `parquet` past `max_rows` or `max_bytes`, by its footer."""
    rows = parquet.metadata.num_rows
    if rows > max_rows:
        raise TableTooLarge(f"{what} holds {rows} rows; at most {max_rows} are read here: download it and read it "
                            "in parts")
    decoded = _decoded_bytes(parquet, range(parquet.num_row_groups), columns)
    if decoded > max_bytes:
        raise TableTooLarge(f"{what} takes at least {_size(decoded)} decoded; at most {_size(max_bytes)} is read here:"
                            " download it and read it in parts")


def batches(parquet: Any, what: str, *, groups: Sequence[int] | None = None, columns: Sequence[str] | None = None,
            max_bytes: int = MAX_BYTES, batch_rows: int = BATCH_ROWS, kept: bool = True) -> Iterator[Any]:
    """The record batches of `groups` (None: all), `batch_rows` at a time, stopping with TableTooLarge once their
    Arrow bytes (`kept`: all so far, else each batch's own, when the caller drops batches) pass `max_bytes` (a
    footer that understated them)."""
    seen = 0
    try:
        stream = parquet.iter_batches(batch_size=batch_rows, row_groups=groups, columns=columns)
        for batch in stream:
            seen = seen + batch.nbytes if kept else batch.nbytes
            if seen > max_bytes:
                raise TableTooLarge(f"{what} decodes to more than {_size(max_bytes)}, more than its footer says; "
                                    "it is not read here")
            yield batch
    except ParquetError:
        raise
    except Exception as error:  # pyarrow raises several types for a damaged file or a missing column
        raise ParquetError(f"{what} is not a readable Parquet file: {error}") from None


def read_table(source: Source, what: str = "the table", *, max_rows: int = MAX_ROWS, max_bytes: int = MAX_BYTES,
               columns: Sequence[str] | None = None) -> Any:
    """A whole table (its `columns`, None: all) as a pyarrow Table, checked against its footer before decoding and
    counted while decoding."""
    import pyarrow as pa  # lazy: as open_parquet

    parquet = open_parquet(source, what)
    if columns is not None:
        missing = [c for c in columns if c not in parquet.schema_arrow.names]
        if missing:
            raise ParquetError(f"{what} has no column {missing[0]!r} (it has {parquet.schema_arrow.names[:20]})")
    check_rows(parquet, what, max_rows=max_rows, max_bytes=max_bytes, columns=columns)
    schema = parquet.schema_arrow if columns is None else pa.schema([parquet.schema_arrow.field(c) for c in columns])
    read = list(batches(parquet, what, columns=columns, max_bytes=max_bytes))
    try:
        return pa.Table.from_batches(read, schema=schema) if read else schema.empty_table()
    except Exception as error:  # a batch that does not match the footer's schema
        raise ParquetError(f"{what} is not a readable Parquet file: {error}") from None


def read_rows(parquet: Any, what: str, first: int, stop: int, *, columns: Sequence[str] | None = None,
              max_bytes: int = MAX_BYTES, max_group_rows: int = MAX_GROUP_ROWS) -> Any:
    """Rows [first, stop) of an open ParquetFile as a pyarrow Table: only the row groups holding them are read, in
    batches, and none of more than `max_group_rows` rows (a page would decode that many to reach its rows)."""
    import pyarrow as pa  # lazy: as open_parquet

    groups, offset, start = [], 0, None
    for index in range(parquet.num_row_groups):
        size = parquet.metadata.row_group(index).num_rows
        if offset + size > first and offset < stop:
            if size > max_group_rows:
                raise TableTooLarge(f"{what} keeps {size} rows in one row group; a page reads groups of at most "
                                    f"{max_group_rows} rows: download it")
            groups.append(index)
            start = offset if start is None else start
        offset += size
    schema = parquet.schema_arrow if columns is None else pa.schema([parquet.schema_arrow.field(c) for c in columns])
    if not groups:
        return schema.empty_table()
    kept, position, wanted = [], start, stop - first
    for batch in batches(parquet, what, groups=groups, columns=columns, max_bytes=max_bytes, kept=False):
        end = position + batch.num_rows
        if end > first:
            piece = batch.slice(max(0, first - position), wanted - sum(b.num_rows for b in kept))
            kept.append(piece)
            if sum(b.num_rows for b in kept) >= wanted or sum(b.nbytes for b in kept) > max_bytes:
                break
        position = end
    if sum(b.nbytes for b in kept) > max_bytes:
        raise TableTooLarge(f"rows {first}-{stop - 1} of {what} take more than {_size(max_bytes)}: download it")
    return pa.Table.from_batches(kept, schema=schema) if kept else schema.empty_table()
