"""The words a store holds (node names, nonces, value keys, artifact names), for 'did you mean' hints."""

from __future__ import annotations

from sqlalchemy import select

from lenscope.store.reader import StoreReader
from lenscope.store.schema import artifacts, nodes, records


def _distinct(reader: StoreReader, column) -> list[str]:
    with reader.read() as connection:
        return sorted(row[0] for row in connection.execute(select(column).distinct()))


def node_names(reader: StoreReader) -> list[str]:
    """Every node name in the store (`grokking.train`, ...), sorted."""
    return _distinct(reader, nodes.c.name)


def nonces(reader: StoreReader) -> list[str]:
    """Every lineage nonce in the store, sorted."""
    return _distinct(reader, nodes.c.nonce)


def value_keys(reader: StoreReader) -> list[str]:
    """Every value key recorded on any node (`train/loss`, ...), sorted."""
    return _distinct(reader, records.c.key)


def artifact_names(reader: StoreReader) -> list[str]:
    """Every artifact name on any node, sorted."""
    return _distinct(reader, artifacts.c.name)
