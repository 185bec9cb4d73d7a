"""The store's tables (SQLAlchemy Core), shared by SQLite and PostgreSQL (S8)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

SCHEMA_VERSION = 2
"""Version of the table layout below; an older store is upgraded in place (store/migrate.py), a newer one refused.

2: checkpoint file digests, one nonce per lineage, leases."""

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL gets 64-bit ids.
_Id = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData()

meta = Table(
    "lenscope_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

nodes = Table(
    "lenscope_nodes",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False),
    Column("nonce", String(6), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("error", Text),
    Column("config", Text),  # JSON
    Column("created", Double, nullable=False),
    Column("checkpoint", Text),  # relative to the store root when inside it
    Column("checkpoint_step", BigInteger),
    UniqueConstraint("name", "nonce", "seq", name="uq_lenscope_nodes_address"),
    Index("ix_lenscope_nodes_nonce_seq", "nonce", "seq"),
)

# One nonce per lineage: seq 0 starts a lineage, so no two seq-0 rows share a nonce.
lineage_nonce = Index("uq_lenscope_nodes_lineage_nonce", nodes.c.nonce, unique=True,
                      sqlite_where=nodes.c.seq == 0, postgresql_where=nodes.c.seq == 0)

edges = Table(
    "lenscope_edges",
    metadata,
    Column("child_id", _Id, ForeignKey("lenscope_nodes.id"), primary_key=True),
    Column("parent_id", _Id, ForeignKey("lenscope_nodes.id"), primary_key=True),
    Column("position", Integer, nullable=False),
    Index("ix_lenscope_edges_parent", "parent_id"),
)

# Append-only value records; the folded value of (node, key) is the record with the highest id.
# `kind` is one of b/i/f/s/n; `num` holds numbers (NaN as NULL) for SQL comparisons and `txt`
# holds the exact text (repr of floats, digits of ints, strings) for lossless reads.
records = Table(
    "lenscope_records",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("node_id", _Id, ForeignKey("lenscope_nodes.id"), nullable=False),
    Column("key", String(200), nullable=False),
    Column("kind", String(1), nullable=False),
    Column("num", Double),
    Column("txt", Text),
    Column("written", Double, nullable=False),
    Index("ix_lenscope_records_node_key_id", "node_id", "key", "id"),
)

artifacts = Table(
    "lenscope_artifacts",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("node_id", _Id, ForeignKey("lenscope_nodes.id"), nullable=False),
    Column("name", String(200), nullable=False),
    Column("version", Integer, nullable=False),
    Column("filename", String(255), nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("created", Double, nullable=False),
    UniqueConstraint("node_id", "name", "version", name="uq_lenscope_artifacts_version"),
    Index("ix_lenscope_artifacts_name", "name"),
)

# What a committed checkpoint folder held: one row per file, path relative to the folder.
checkpoint_files = Table(
    "lenscope_checkpoint_files",
    metadata,
    Column("node_id", _Id, ForeignKey("lenscope_nodes.id"), primary_key=True),
    Column("path", String(1000), primary_key=True),
    Column("size", BigInteger, nullable=False),
    Column("sha256", String(64), nullable=False),
)

# ---- leases (store/leases.py): who runs a lineage now. One row per owned lineage while its job lives;
# the row of a killed job stays, so `ls` can tell its running node is stale (owner gone).
leases = Table(
    "lenscope_leases",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("nonce", String(6), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("token", String(32), nullable=False),  # this holder's; a takeover writes a new one
    Column("started", Double, nullable=False),
    Column("heartbeat", Double, nullable=False),  # unix time, written every HEARTBEAT_S while the job lives
)
