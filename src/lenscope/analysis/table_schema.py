"""Table schemas (D2): column specs -> `datasets.Features`, per-batch validation, rows, and reading tables back.

A schema maps column names to a per-example spec, in any of these forms:

    "int32"                      a scalar
    "float32[32]", "f32[4,4]"    a fixed-shape array (``?`` for a free first dimension)
    "string"                     text, e.g. a decoded input
    ("float32", (32,))           dtype and shape
    {"dtype": "float32", "shape": [32]}   the YAML-friendly form
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from ..errors import UsageError, hint
from ..store import Store
from ..store.parquet_reader import ParquetError, read_table

# Tables never reach the network (DESIGN 8); set before `datasets` is first imported.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

STRING = "string"
_ALIASES = {"f16": "float16", "f32": "float32", "f64": "float64", "i8": "int8", "i16": "int16", "i32": "int32",
            "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "str": STRING}
_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64", STRING)
_SPEC_TEXT = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(?:\[\s*([0-9?,\s]*)\s*\])?\s*$")
_FORMS = ('"int32"', '"float32[32]"', '"string"', '("float32", (32,))', '{"dtype": "float32", "shape": [32]}')


@dataclass(frozen=True)
class Column:
    """One column of a table: numpy dtype name (or "string") and the per-example shape (None = free first dim)."""

    name: str
    dtype: str
    shape: tuple[int | None, ...] = ()

    def __str__(self) -> str:
        dims = ",".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.dtype}[{dims}]" if self.shape else self.dtype

    def feature(self) -> Any:
        """The `datasets` feature holding this column."""
        import datasets  # lazy: heavy, and only tables need it

        if self.dtype == STRING or not self.shape:
            return datasets.Value(self.dtype)
        if len(self.shape) == 1:
            return datasets.List(datasets.Value(self.dtype), length=-1 if self.shape[0] is None else self.shape[0])
        array = {2: datasets.Array2D, 3: datasets.Array3D, 4: datasets.Array4D, 5: datasets.Array5D}[len(self.shape)]
        return array(shape=self.shape, dtype=self.dtype)


def _bad(name: str, spec: Any, why: str) -> UsageError:
    return UsageError(f"table schema column {name!r}: {why}, got {spec!r}; write it as one of {', '.join(_FORMS)}")


def _dtype(name: str, spec: Any, text: Any) -> str:
    if isinstance(text, (type, np.dtype)):
        text = np.dtype(text).name
    if not isinstance(text, str):
        raise _bad(name, spec, "the dtype must be a string like 'float32'")
    text = _ALIASES.get(text.lower(), text.lower())
    if text not in _DTYPES:
        raise _bad(name, spec, f"unknown dtype {text!r}{hint(text, _DTYPES)} (known: {', '.join(_DTYPES)})")
    return text


def _shape(name: str, spec: Any, dims: Any) -> tuple[int | None, ...]:
    if dims is None:
        return ()
    if isinstance(dims, int) and not isinstance(dims, bool):
        dims = (dims,)
    if not isinstance(dims, (tuple, list)):
        raise _bad(name, spec, "the shape must be a tuple of sizes")
    out: list[int | None] = []
    for i, d in enumerate(dims):
        if d in (None, "?") and i == 0:
            out.append(None)
        elif isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0:
            out.append(int(d))
        else:
            raise _bad(name, spec, f"dimension {i} must be a positive int" + (" or '?'" if i == 0 else ""))
    if len(out) > 5:
        raise _bad(name, spec, "at most 5 dimensions per example are supported")
    return tuple(out)


def parse_column(name: str, spec: Any) -> Column:
    """One Column from any accepted spec form; UsageError names the column and the accepted forms."""
    if not isinstance(name, str) or not name:
        raise UsageError(f"table schema column names must be nonempty strings, got {name!r}")
    if isinstance(spec, Column):
        return Column(name, spec.dtype, spec.shape)
    if isinstance(spec, str):
        match = _SPEC_TEXT.match(spec)
        if not match:
            raise _bad(name, spec, "cannot read this spec")
        dims = match.group(2)
        parts = [p.strip() for p in dims.split(",") if p.strip()] if dims is not None else []
        dtype = _dtype(name, spec, match.group(1))
        shape = _shape(name, spec, [None if p == "?" else int(p) if p.isdigit() else p for p in parts])
    elif isinstance(spec, Mapping):
        unknown = set(spec) - {"dtype", "shape"}
        if unknown or "dtype" not in spec:
            raise _bad(name, spec, "a mapping needs the keys dtype and (optionally) shape")
        dtype, shape = _dtype(name, spec, spec["dtype"]), _shape(name, spec, spec.get("shape"))
    elif isinstance(spec, (tuple, list)) and len(spec) == 2:
        dtype, shape = _dtype(name, spec, spec[0]), _shape(name, spec, spec[1])
    elif isinstance(spec, (type, np.dtype)):
        dtype, shape = _dtype(name, spec, spec), ()
    else:
        raise _bad(name, spec, "cannot read this spec")
    if dtype == STRING and shape:
        raise _bad(name, spec, "string columns hold one string per example (no shape)")
    return Column(name, dtype, shape)


def parse_schema(schema: Mapping[str, Any] | None) -> dict[str, Column]:
    """Validate a schema mapping into {name: Column}; None stays None (not a table analysis)."""
    if schema is None:
        return None
    if not isinstance(schema, Mapping) or not schema:
        raise UsageError(f"a table schema must be a nonempty mapping column -> spec, got {schema!r}")
    return {name: parse_column(name, spec) for name, spec in schema.items()}


def features(schema: Mapping[str, Any]) -> Any:
    """The `datasets.Features` of a schema, in column order."""
    import datasets  # lazy: heavy, and only tables need it

    columns = schema if all(isinstance(c, Column) for c in schema.values()) else parse_schema(schema)
    return datasets.Features({name: column.feature() for name, column in columns.items()})


# -- one batch -> rows -----------------------------------------------------------------


def _kind(dtype: Any) -> str:
    if jax.dtypes.issubdtype(dtype, np.bool_):
        return "b"
    if jax.dtypes.issubdtype(dtype, np.integer):
        return "i"
    if jax.dtypes.issubdtype(dtype, np.floating):
        return "f"
    return "?"


_FITS = {"b": {"b"}, "i": {"b", "i"}, "f": {"b", "i", "f"}}


def _mismatch(column: Column, expected: str, actual: str) -> UsageError:
    return UsageError(f"table column {column.name!r}: expected {expected}, got {actual}; "
                      "make analyze() (or columns()) return one entry per example matching the schema")


def _strings(column: Column, value: Any) -> list[str]:
    if isinstance(value, np.ndarray) and value.dtype.kind in "US":
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise _mismatch(column, "a list of str (one per example)", type(value).__name__)
    return list(value)


def column_values(column: Column, value: Any, count: int | None) -> list:
    """Check one batch's column against its spec and return one plain value per example."""
    if column.dtype == STRING:
        values = _strings(column, value)
    else:
        if isinstance(value, (list, tuple)) or not hasattr(value, "shape"):
            raise _mismatch(column, f"an array [examples, {column!s}]", type(value).__name__)
        array = np.asarray(value)
        actual = f"{array.dtype.name}{list(array.shape)}"
        shape_ok = array.ndim == len(column.shape) + 1 and all(
            want is None or want == got for want, got in zip(column.shape, array.shape[1:]))
        if not shape_ok:
            dims = ", ".join(["examples"] + ["?" if d is None else str(d) for d in column.shape])
            raise _mismatch(column, f"shape [{dims}] of {column.dtype}", actual)
        want_kind = _kind(np.dtype(column.dtype))
        if _kind(array.dtype) not in _FITS[want_kind]:
            raise _mismatch(column, f"dtype {column.dtype} (or one that converts without changing kind)", actual)
        values = array.astype(column.dtype, copy=False).tolist()
    if count is not None and len(values) != count:
        raise _mismatch(column, f"{count} examples (as the other columns)", f"{len(values)}")
    return values


def batch_rows(schema: Mapping[str, Column], columns: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Rows (one dict per example) of one batch's columns, validated against the schema first."""
    if not isinstance(columns, Mapping):
        raise UsageError(f"a table analysis must produce a mapping column -> per-example values, "
                         f"got {type(columns).__name__}; columns: {', '.join(schema)}")
    extra = [k for k in columns if k not in schema]
    if extra:
        raise UsageError(f"table result has column {extra[0]!r}, which the schema lacks{hint(str(extra[0]), schema)}; "
                         f"schema columns: {', '.join(schema)}")
    values: dict[str, list] = {}
    count: int | None = None
    for name, column in schema.items():
        if name not in columns:
            have = ", ".join(map(str, columns)) or "none"
            raise UsageError(f"table column {name!r} is missing from the batch result (have {have}); "
                             "return it from analyze(), or name a batch field")
        values[name] = column_values(column, columns[name], count)
        count = len(values[name])
    for i in range(count or 0):
        yield {name: vals[i] for name, vals in values.items()}


# -- reading tables back -----------------------------------------------------------------


TABLE_ROWS = 1 << 24  # rows an analysis table read back into memory may hold
TABLE_BYTES = 4 << 30  # its decoded bytes


def dataset_from_parquet_bytes(content: bytes, what: str = "the table") -> Any:
    """A `datasets.Dataset` (features restored from the file's metadata) from Parquet bytes, in memory; rows and
    decoded size checked from the file's footer before decoding (store.parquet_reader), so a small file that
    decodes to gigabytes is refused by name instead of filling memory."""
    import datasets  # lazy: datasets and pyarrow are heavy, and only tables need them
    from datasets.table import InMemoryTable  # lazy: as above

    try:
        table = read_table(content, what, max_rows=TABLE_ROWS, max_bytes=TABLE_BYTES)
    except ParquetError as err:
        raise UsageError(f"{err}; expected a table written by an analysis that declares SCHEMA") from None
    return datasets.Dataset(InMemoryTable(table))


def load_table(store: Any, node: Any, name: str, version: int | None = None) -> Any:
    """The table of analysis `name` on `node` as a `datasets.Dataset` (`store` is a Store, URL or folder).

    `name` is the analysis NAME (its table is artifact NAME.parquet) or an artifact name itself.
    """
    store = store if isinstance(store, Store) else Store(store)
    table = name if name.endswith(".parquet") else f"{name}.parquet"
    payload = store.artifact(node, table if table in store.artifact_names(node) else name, version=version)
    if not payload.filename.endswith(".parquet"):
        raise UsageError(f"artifact {name!r} on {node} is {payload.filename!r}, not a table (.parquet); "
                         "tables are written by analyses that declare SCHEMA")
    return dataset_from_parquet_bytes(payload.content, f"artifact {payload.filename!r} on {node}")
