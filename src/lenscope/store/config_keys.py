"""Config paths as query keys: `config/optimization/lr` reads a leaf of a node's JSON config in SQL (E2).

A node's config is one JSON text column. A `config/...` key is compiled per dialect (SQLite's
`json_type`/`json_extract`, PostgreSQL's `jsonb_typeof`/`#>>`) into the same three columns a value
record has (kind, num, txt), so `where` and `sort` treat config leaves exactly as value keys: numbers
compare with numbers, strings with strings, a node without the path matches no condition.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Float, String
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from lenscope.errors import UsageError
from lenscope.store.schema import nodes

PREFIX = "config/"


def is_config_key(key: str) -> bool:
    """Whether `key` names a config leaf (`config/...`) rather than a value key or column."""
    return isinstance(key, str) and key.startswith(PREFIX)


def config_path(key: str) -> tuple[str, ...]:
    """The JSON path of a `config/a/b` key (`.` separates too); a UsageError for an empty or odd path."""
    parts = tuple(p for p in key[len(PREFIX):].replace(".", "/").split("/"))
    if not parts or any(not p or any(c in p for c in '"{},\\') for p in parts):
        raise UsageError(f"bad config key {key!r}: expected config/SECTION/NAME, e.g. config/optimization/lr")
    return parts


class _ConfigLeaf(FunctionElement):
    """One part (kind, num or txt) of the config leaf at `path` of the correlated node row."""

    inherit_cache = False  # the path is SQL text, not a bound parameter: statements holding it are not cached

    def __init__(self, part: str, path: tuple[str, ...]) -> None:
        self.part, self.path = part, path
        self.type = Float() if part == "num" else String()
        super().__init__()


def _sqlite_path(path: tuple[str, ...]) -> str:
    return "'$" + "".join(f'."{p}"' for p in path).replace("'", "''") + "'"


@compiles(_ConfigLeaf, "sqlite")
def _sqlite(element: _ConfigLeaf, compiler, **kw) -> str:
    column = compiler.process(nodes.c.config, **kw)
    path = _sqlite_path(element.path)
    kind = f"json_type({column}, {path})"
    if element.part == "kind":
        return (f"(CASE {kind} WHEN 'integer' THEN 'i' WHEN 'real' THEN 'f' WHEN 'text' THEN 's' WHEN 'true' "
                f"THEN 'b' WHEN 'false' THEN 'b' WHEN 'null' THEN 'n' WHEN 'object' THEN 'o' WHEN 'array' "
                f"THEN 'o' END)")
    if element.part == "num":
        return (f"(CASE WHEN {kind} IN ('integer', 'real') THEN CAST(json_extract({column}, {path}) AS REAL) "
                f"WHEN {kind} = 'true' THEN 1.0 WHEN {kind} = 'false' THEN 0.0 END)")
    return f"(CASE WHEN {kind} = 'text' THEN json_extract({column}, {path}) END)"


@compiles(_ConfigLeaf, "postgresql")
def _postgresql(element: _ConfigLeaf, compiler, **kw) -> str:
    column = compiler.process(nodes.c.config, **kw)
    path = "'{" + ",".join(f'"{p}"' for p in element.path).replace("'", "''") + "}'"
    leaf = f"(CAST({column} AS jsonb) #> {path})"
    kind = f"jsonb_typeof({leaf})"
    if element.part == "kind":
        return (f"(CASE {kind} WHEN 'number' THEN 'f' WHEN 'string' THEN 's' WHEN 'boolean' THEN 'b' "
                f"WHEN 'null' THEN 'n' WHEN 'object' THEN 'o' WHEN 'array' THEN 'o' END)")
    if element.part == "num":
        return (f"(CASE WHEN {kind} = 'number' THEN CAST({leaf} #>> '{{}}' AS double precision) "
                f"WHEN {kind} = 'boolean' THEN (CASE WHEN {leaf} = 'true'::jsonb THEN 1.0 ELSE 0.0 END) END)")
    return f"(CASE WHEN {kind} = 'string' THEN {leaf} #>> '{{}}' END)"


def leaf_columns(key: str) -> SimpleNamespace:
    """A stand-in for a record row (`.c.kind`, `.c.num`, `.c.txt`) holding the config leaf of `key`."""
    path = config_path(key)
    return SimpleNamespace(c=SimpleNamespace(kind=_ConfigLeaf("kind", path), num=_ConfigLeaf("num", path),
                                             txt=_ConfigLeaf("txt", path)))


def sort_columns(key: str) -> tuple[ColumnElement, ColumnElement]:
    """(number, text) of the config leaf of `key`, for ORDER BY."""
    leaf = leaf_columns(key).c
    return leaf.num, leaf.txt


def leaves(config_text: str | None, keys: list[str]) -> dict[str, Any]:
    """`{key: value}` for each config key whose path the JSON `config_text` holds."""
    if not config_text or not keys:
        return {}
    config = json.loads(config_text)
    missing = object()
    out = {}
    for key in keys:
        node: Any = config
        for part in config_path(key):
            node = node.get(part, missing) if isinstance(node, dict) else missing
            if node is missing:
                break
        if node is not missing:
            out[key] = node
    return out


def flatten(config: Any) -> dict[str, Any]:
    """`{"config/a/b": leaf}` for every leaf of a nested config (an empty dict is a leaf)."""
    out: dict[str, Any] = {}

    def walk(tree: dict, path: str) -> None:
        for key, value in tree.items():
            if isinstance(value, dict) and value:
                walk(value, f"{path}{key}/")
            else:
                out[f"{path}{key}"] = value

    walk(config or {}, PREFIX)
    return out
