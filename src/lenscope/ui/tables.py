"""Parquet previews: column names and types, the row count, and one page of rows as short display strings."""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PAGE_ROWS = 50
MAX_CELL = 120  # characters of one cell shown; the download has the rest
MAX_ITEMS = 6  # items of a list cell shown


class TableError(ValueError):
    """A stored table that cannot be read as Parquet."""


@dataclass
class TablePage:
    """One page of a Parquet table for display."""

    columns: list[tuple[str, str]]  # (name, Arrow type)
    rows: list[list[str]] = field(default_factory=list)
    total: int = 0
    page: int = 0
    pages: int = 1
    first: int = 0  # index of the first row shown


def preview(content: bytes | Path, page: int = 0, page_rows: int = PAGE_ROWS) -> TablePage:
    """Page `page` (from 0, clamped to the last) of a Parquet file (bytes or path), reading only its row groups."""
    # lazy: pyarrow takes ~0.2 s to import and only pages with a table need it
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(str(content) if isinstance(content, Path) else io.BytesIO(content))
    except Exception as error:  # pyarrow raises several types for a damaged file
        raise TableError(f"not a readable Parquet file: {error}") from None
    schema = parquet.schema_arrow
    total = parquet.metadata.num_rows
    pages = max(1, math.ceil(total / page_rows))
    page = min(max(0, page), pages - 1)
    first, stop = page * page_rows, min(total, (page + 1) * page_rows)
    groups, offset, start = [], 0, None
    for index in range(parquet.num_row_groups):
        size = parquet.metadata.row_group(index).num_rows
        if offset + size > first and offset < stop:
            groups.append(index)
            start = offset if start is None else start
        offset += size
    rows: list[list[str]] = []
    if groups:
        table = parquet.read_row_groups(groups).slice(first - start, stop - first)
        columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
        rows = [[cell(column[i]) for column in columns] for i in range(table.num_rows)]
    return TablePage([(f.name, str(f.type)) for f in schema], rows, total, page, pages, first)


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
