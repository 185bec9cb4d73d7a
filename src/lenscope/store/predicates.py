"""SQL pieces for `where` and `sort`: comparisons on columns and on folded value keys (S6)."""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import and_, case, exists, false, or_, select
from sqlalchemy.sql import ColumnElement

from lenscope.errors import UsageError
from lenscope.store.schema import nodes, records

OPS = ("==", "!=", "<", "<=", ">", ">=", "in", "like")


def _compare(column: ColumnElement, op: str, value: Any) -> ColumnElement:
    if op == "==":
        return column == value
    if op == "!=":
        return column != value
    if op == "<":
        return column < value
    if op == "<=":
        return column <= value
    if op == ">":
        return column > value
    return column >= value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value))


def check_value(key: str, op: str, value: Any) -> None:
    """Refuse values that cannot mean anything for `op` before any SQL runs."""
    if op == "in":
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise UsageError(f"where({key!r}, 'in', ...) needs a list of values, got {value!r}")
        for item in value:
            if not (item is None or isinstance(item, str) or _is_number(item)):
                raise UsageError(f"where({key!r}, 'in', ...) got {item!r}; expected numbers, strings or None")
    elif op == "like":
        if not isinstance(value, str):
            raise UsageError(f"where({key!r}, 'like', ...) needs a string pattern like 'train/%', got {value!r}")
    elif value is None:
        if op not in ("==", "!="):
            raise UsageError(f"where({key!r}, {op!r}, None): only == and != compare with None")
    elif isinstance(value, float) and math.isnan(value):
        raise UsageError(f"where({key!r}, {op!r}, nan): NaN compares with nothing; NaN values match no condition")
    elif not (isinstance(value, str) or _is_number(value)):
        raise UsageError(f"where({key!r}, {op!r}, ...) got {type(value).__name__}; expected a number, string or None")


def _holds_text(column: ColumnElement) -> bool:
    return column.type.python_type is str


def check_column_value(key: str, column: ColumnElement, op: str, value: Any) -> None:
    """Refuse a value of the wrong kind for a column (text for `seq`, a number for `name`), the same on every backend.

    SQLite would compare them anyway (every number sorts before every text), PostgreSQL would fail with SQL.
    """
    text = _holds_text(column)
    kind = "text" if text else "numbers"
    if op == "like" and not text:
        raise UsageError(f"where({key!r}, 'like', ...): {key} holds numbers; like matches text columns and values")
    for item in (value if op == "in" else [value]):
        if item is None or isinstance(item, str) == text and not isinstance(item, bool):
            continue
        raise UsageError(f"where({key!r}, {op!r}, {value!r}): {key} holds {kind}, so {item!r} cannot match; "
                         f"give {'a text' if text else 'a number'}")


def column_condition(key: str, column: ColumnElement, op: str, value: Any) -> ColumnElement:
    """`column op value` for a node or artifact column, after checking the value's kind against the column's."""
    check_value(key, op, value)
    check_column_value(key, column, op, value)
    if op == "in":
        return column.in_(list(value))
    if op == "like":
        return column.like(value)
    if value is None:
        return column.is_(None) if op == "==" else column.is_not(None)
    return _compare(column, op, value)


def value_test(record, op: str, value: Any) -> ColumnElement:
    """The comparison on one record row (or anything with `.c.kind/.num/.txt`): numbers against `num`, strings
    against `txt` of string records."""
    if op == "in":
        items = list(value)
        numbers = [float(v) for v in items if v is not None and not isinstance(v, str)]
        strings = [v for v in items if isinstance(v, str)]
        parts = []
        if numbers:
            parts.append(record.c.num.in_(numbers))
        if strings:
            parts.append(and_(record.c.kind == "s", record.c.txt.in_(strings)))
        if any(v is None for v in items):
            parts.append(record.c.kind == "n")
        return or_(*parts) if parts else false()
    if op == "like":
        return and_(record.c.kind == "s", record.c.txt.like(value))
    if value is None:
        return record.c.kind == "n" if op == "==" else record.c.kind != "n"
    if isinstance(value, str):
        return and_(record.c.kind == "s", _compare(record.c.txt, op, value))
    return _compare(record.c.num, op, float(value))


def value_condition(key: str, op: str, value: Any) -> ColumnElement:
    """Nodes whose folded value `key` (its latest record) satisfies `op value`; nodes without the key never match."""
    check_value(key, op, value)
    record, later = records.alias(), records.alias()
    is_latest = ~exists().where(later.c.node_id == record.c.node_id, later.c.key == record.c.key,
                                later.c.id > record.c.id)
    return exists().where(record.c.node_id == nodes.c.id, record.c.key == key, is_latest,
                          value_test(record, op, value))


def value_sort_columns(key: str) -> tuple[ColumnElement, ColumnElement]:
    """(number, text) of a node's latest record of `key`, as correlated scalar subqueries for sorting."""
    record = records.alias()

    def newest(column: ColumnElement) -> ColumnElement:
        stmt = select(column).where(record.c.node_id == nodes.c.id, record.c.key == key)
        return stmt.order_by(record.c.id.desc()).limit(1).scalar_subquery()

    return newest(record.c.num), newest(case((record.c.kind == "s", record.c.txt), else_=None))


def null_last_order(column: ColumnElement, ascending: bool) -> list[ColumnElement]:
    """ORDER BY terms putting NULLs last in either direction, the same on SQLite and PostgreSQL."""
    return [case((column.is_(None), 1), else_=0), column.asc() if ascending else column.desc()]
