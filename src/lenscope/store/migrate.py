"""Upgrading a store of an older schema version in place: additions only, in the opening transaction (S8)."""

from __future__ import annotations

from sqlalchemy import Connection, func, inspect, select, text, update

from lenscope.errors import StoreError
from lenscope.store.node import Node
from lenscope.store.schema import SCHEMA_VERSION, meta, metadata, nodes

UPGRADABLE = ("1", "2")
"""Stored versions this lenscope upgrades to SCHEMA_VERSION: each differs from it only by added tables,
nullable columns and indexes."""


def upgrade(connection: Connection, version: str, *, readonly: bool, shown: str) -> str:
    """Bring a store recorded as `version` up to SCHEMA_VERSION inside `connection`'s write transaction.

    Returns the version now recorded. Versions this lenscope cannot upgrade are returned unchanged
    (the caller refuses them); a readonly open of an upgradable store is refused with the way out.
    """
    if version not in UPGRADABLE:
        return version
    if readonly:
        raise StoreError(
            f"store at {shown} has schema version {version}; this lenscope reads version {SCHEMA_VERSION} and "
            "upgrades it in place (adding tables and columns only) when it is opened writable: run "
            "`lenscope fsck --repair` on it once, or any job that writes to it")
    # The version row's lock makes a concurrent upgrader wait here, then see the new version (PostgreSQL).
    locked = connection.execute(
        select(meta.c.value).where(meta.c.key == "schema_version").with_for_update()).scalar_one()
    if locked not in UPGRADABLE:
        return locked
    if locked == "1":
        _refuse_shared_nonces(connection, shown)
    _add_missing(connection)
    connection.execute(update(meta).where(meta.c.key == "schema_version").values(value=str(SCHEMA_VERSION)))
    return str(SCHEMA_VERSION)


def _refuse_shared_nonces(connection: Connection, shown: str) -> None:
    """Version 2 gives each lineage its own nonce; lineages that already share one cannot be upgraded silently."""
    shared = select(nodes.c.nonce).where(nodes.c.seq == 0).group_by(nodes.c.nonce).having(func.count() > 1)
    rows = connection.execute(
        select(nodes.c.name, nodes.c.nonce).where(nodes.c.seq == 0, nodes.c.nonce.in_(shared.scalar_subquery()))
        .order_by(nodes.c.nonce, nodes.c.id).limit(6)
    ).all()
    if rows:
        listed = ", ".join(Node(row.name, row.nonce, 0).address for row in rows)
        raise StoreError(
            f"store at {shown} cannot be upgraded to schema version {SCHEMA_VERSION}: lineages share a nonce "
            f"({listed}), written by concurrent runs of an older lenscope; open it with that lenscope")


def _add_missing(connection: Connection) -> None:
    """Create the tables, columns and indexes of the current schema that the database lacks."""
    found = inspect(connection)
    existing = set(found.get_table_names())
    for table in metadata.sorted_tables:
        if table.name not in existing:
            table.create(connection)
            continue
        have = {column["name"] for column in found.get_columns(table.name)}
        for column in table.columns:
            if column.name in have:
                continue
            if not column.nullable:
                raise StoreError(f"cannot upgrade table {table.name}: new column {column.name} must be nullable")
            kind = column.type.compile(dialect=connection.dialect)
            connection.execute(text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}'))
        indexed = {index["name"] for index in found.get_indexes(table.name)}
        for index in table.indexes:
            if index.name not in indexed:
                index.create(connection)
