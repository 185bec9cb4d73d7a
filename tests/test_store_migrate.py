"""A store of schema version 1 is upgraded in place when opened writable, refused readonly (S8)."""

from __future__ import annotations

import pytest
from pg_server import postgres_server, postgres_url  # noqa: F401
from sqlalchemy import create_engine, inspect, text
from store_fixtures import backend, store_url  # noqa: F401

from lenscope.cli.main import main
from lenscope.errors import StoreError
from lenscope.store import SCHEMA_VERSION, Store
from lenscope.store.engine import locate

V1_TABLES = {"lenscope_meta", "lenscope_nodes", "lenscope_edges", "lenscope_records", "lenscope_artifacts"}


def _as_version_1(url: str) -> None:
    """Turn a fresh store into what lenscope with schema version 1 made: its five tables, no lineage nonce index."""
    engine = create_engine(locate(url).url)
    with engine.begin() as connection:
        connection.execute(text("DROP INDEX uq_lenscope_nodes_lineage_nonce"))
        for table in set(inspect(connection).get_table_names()) - V1_TABLES:
            connection.execute(text(f"DROP TABLE {table}"))
        connection.execute(text("UPDATE lenscope_meta SET value = '1' WHERE key = 'schema_version'"))
    engine.dispose()


def _raw(url: str, sql: str, **params) -> list:
    """Run one SQL statement on the store's database; the rows of a SELECT."""
    engine = create_engine(locate(url).url)
    with engine.begin() as connection:
        result = connection.execute(text(sql), params)
        rows = result.all() if result.returns_rows else []
    engine.dispose()
    return rows


def test_a_version_1_store_is_upgraded_in_place_keeping_its_data(store_url):
    with Store(store_url) as store:
        node = store.new_node("job")
        store.put_artifact(node, "a", "a.bin", b"kept")
    _as_version_1(store_url)

    with pytest.raises(StoreError, match=rf"schema version 1; this lenscope reads version {SCHEMA_VERSION} .*"
                                         r"`lenscope fsck --repair`"):
        Store(store_url, readonly=True).query().count()

    with Store(store_url) as store:
        assert store.artifact(node, "a").content == b"kept"
        assert store.status(node) == "running"
        store.mark_checkpoint(node, store.checkpoint_dir(node), step=1)  # the new tables are there
        assert store.checkpoint_files(node) == []
    assert _raw(store_url, "SELECT value FROM lenscope_meta") == [(str(SCHEMA_VERSION),)]
    with Store(store_url, readonly=True) as reader:
        assert reader.query().count() == 1


def test_lineages_sharing_a_nonce_stop_the_upgrade_with_their_names(store_url):
    with Store(store_url) as store:
        first = store.new_node("job")
    _as_version_1(store_url)
    _raw(store_url, "INSERT INTO lenscope_nodes (name, nonce, seq, status, created) VALUES ('other', :n, 0, 'done', 0)",
         n=first.nonce)
    with pytest.raises(StoreError, match=rf"lineages share a nonce \(job@{first.nonce}:0, other@{first.nonce}:0\)"):
        Store(store_url)
    assert _raw(store_url, "SELECT value FROM lenscope_meta") == [("1",)]  # nothing half-done


def test_fsck_repair_is_the_way_to_upgrade_a_store_others_read(store_url, capsys):
    with Store(store_url) as store:
        store.new_node("job")
    _as_version_1(store_url)
    assert main(["fsck", "--store", store_url]) == 2
    assert "`lenscope fsck --repair`" in capsys.readouterr().err
    assert main(["fsck", "--repair", "--store", store_url]) == 0
    assert _raw(store_url, "SELECT value FROM lenscope_meta") == [(str(SCHEMA_VERSION),)]
