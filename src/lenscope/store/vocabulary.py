"""The words a store holds (node names, nonces, value keys, artifact names), for 'did you mean' hints."""

from __future__ import annotations

import json

from sqlalchemy import select

from lenscope.store.config_keys import flatten
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


def config_keys(reader: StoreReader) -> list[str]:
    """Every `config/...` leaf path of any node's config, sorted."""
    with reader.read() as connection:
        texts = connection.execute(select(nodes.c.config).distinct().where(nodes.c.config.is_not(None))).scalars()
        return sorted({key for text in texts for key in flatten(json.loads(text))})
