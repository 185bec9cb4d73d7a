"""Parquet previews: column names and types, the row count, and one page of rows as short display strings; a
large or cached table's outline (its footer alone), which the node page shows folded. Every read goes through
lenscope.store.parquet_reader: checked against the footer before decoding, a page reading only its rows."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lenscope.store.parquet_reader import ParquetError, open_parquet, read_rows, read_table

PAGE_ROWS = 50
MAX_CELL = 120  # characters of one cell shown; the download has the rest
MAX_ITEMS = 6  # items of a list cell shown
MAX_COLUMNS = 40  # columns a page shows (a page of a very wide table stays small); the download has them all
FOLD_BYTES = 1 << 20  # a table larger than this sits folded on its node page: outlined, previewed on its own page
CACHE_PREFIXES = ("activations-",)  # caches a job keeps on a node (dictionaries' captured activations): folded too


TableError = ParquetError  # a stored table that cannot be read as Parquet, or not within the reader's bounds
MAX_PAGE_BYTES = 16 << 20  # decoded bytes of the rows one page shows


@dataclass
class TablePage:
    """One page of a Parquet table for display."""

    columns: list[tuple[str, str]]  # (name, Arrow type)
    rows: list[list[str]] = field(default_factory=list)
    total: int = 0
    page: int = 0
    pages: int = 1
    first: int = 0  # index of the first row shown
    more_columns: int = 0  # columns past MAX_COLUMNS, not shown


def fold_reason(name: str, size: int) -> str:
    """Why the node page folds a table: a cache a job keeps there, or over FOLD_BYTES; "" when it does not."""
    if name.startswith(CACHE_PREFIXES):
        return "a cache kept on this node"
    return "large" if size > FOLD_BYTES else ""


def _open(content: bytes | Path) -> Any:
    return open_parquet(content, "the table")


def outline(content: bytes | Path) -> TablePage:
    """A table's columns (the first MAX_COLUMNS) and row count, read from its footer alone: no rows."""
    parquet = _open(content)
    fields = [(f.name, str(f.type)) for f in parquet.schema_arrow]
    return TablePage(fields[:MAX_COLUMNS], [], parquet.metadata.num_rows,
                     more_columns=max(0, len(fields) - MAX_COLUMNS))


def preview(content: bytes | Path, page: int = 0, page_rows: int = PAGE_ROWS) -> TablePage:
    """Page `page` (from 0, clamped to the last) of a Parquet file (bytes or path), reading only its row groups and
    its first MAX_COLUMNS columns."""
    parquet = _open(content)
    schema = parquet.schema_arrow
    unique = len(set(schema.names)) == len(schema.names)  # columns are read by name, which must then be unique
    total = parquet.metadata.num_rows
    pages = max(1, math.ceil(total / page_rows))
    page = min(max(0, page), pages - 1)
    first, stop = page * page_rows, min(total, (page + 1) * page_rows)
    table = read_rows(parquet, "the table", first, stop, columns=schema.names[:MAX_COLUMNS] if unique else None,
                      max_bytes=MAX_PAGE_BYTES)
    shown = [table.column(i).to_pylist() for i in range(min(table.num_columns, MAX_COLUMNS))]
    rows = [[cell(column[i]) for column in shown] for i in range(table.num_rows)]
    fields = [(f.name, str(f.type)) for f in schema]
    return TablePage(fields[:MAX_COLUMNS], rows, total, page, pages, first, max(0, len(fields) - MAX_COLUMNS))


MAX_WHOLE_ROWS = 1 << 18  # rows of a table a page reads whole (a crosscoder's latents, a dashboard's)
MAX_WHOLE_BYTES = 32 << 20  # their decoded (Arrow) bytes: a page's Python lists take several times more


def columns(content: bytes | Path, what: str = "the table", names: list[str] | None = None) -> dict[str, list[Any]]:
    """The columns `names` (None: all) of a Parquet file (bytes or path) as Python lists, by name: for a page that
    draws a small table whole (a crosscoder's latents); a TableError past MAX_WHOLE_ROWS or MAX_WHOLE_BYTES
    decoded, known before decoding."""
    table = read_table(content, what, max_rows=MAX_WHOLE_ROWS, max_bytes=MAX_WHOLE_BYTES, columns=names)
    return {name: table.column(i).to_pylist() for i, name in enumerate(table.column_names)}


def cell(value: Any) -> str:
    """A short display string for one table value (lists show their first items and their length)."""
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, (list, tuple)):
        shown = ", ".join(cell(item) for item in value[:MAX_ITEMS])
        more = ", …" if len(value) > MAX_ITEMS else ""
        return _cut(f"[{shown}{more}] ({len(value)})" if more else f"[{shown}]")
    if isinstance(value, dict):
        return _cut(json.dumps(value, default=str))
    return _cut(str(value))


def _cut(text: str) -> str:
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"
