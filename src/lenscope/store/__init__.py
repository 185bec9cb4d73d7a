"""The lineage store: nodes, values, artifacts and checkpoints in SQLite or PostgreSQL (DESIGN section 4)."""

from lenscope.store.blobs import Payload
from lenscope.store.fsck import fsck
from lenscope.store.garbage import collect
from lenscope.store.node import Node
from lenscope.store.query import Query
from lenscope.store.reader import StoreReader
from lenscope.store.schema import SCHEMA_VERSION
from lenscope.store.store import NodeRecord, Store

__all__ = ["SCHEMA_VERSION", "Node", "NodeRecord", "Payload", "Query", "Store", "StoreReader", "collect", "fsck"]
