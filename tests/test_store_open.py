"""Opening stores (S7, S8): folders and URLs, SQLite settings, schema versions, readonly opening."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from pg_server import postgres_server, postgres_url  # noqa: F401
from sqlalchemy import create_engine, text
from store_fixtures import backend, store, store_url  # noqa: F401

from lenscope.errors import StoreError, UsageError
from lenscope.store import SCHEMA_VERSION, Store
from lenscope.store.engine import locate


def test_default_is_env_then_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LENSCOPE_STORE", raising=False)
    with Store() as default:
        assert default.root == tmp_path / "runs"
        assert (tmp_path / "runs" / "lenscope.db").is_file()
    monkeypatch.setenv("LENSCOPE_STORE", str(tmp_path / "elsewhere"))
    with Store() as from_env:
        assert from_env.root == tmp_path / "elsewhere"
        assert (tmp_path / "elsewhere" / "lenscope.db").is_file()


def test_folder_store_layout_and_sqlite_settings(tmp_path):
    with Store(tmp_path / "s") as store:
        node = store.new_node("job")
        store.put_artifact(node, "f", "f.bin", b"abc")
        assert store.url == f"sqlite:///{tmp_path / 's' / 'lenscope.db'}"
        with store._engine().connect() as connection:
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
            assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    assert {p.name for p in (tmp_path / "s").iterdir()} >= {"lenscope.db", "blobs"}
    raw = sqlite3.connect(tmp_path / "s" / "lenscope.db")
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    version = raw.execute("SELECT value FROM lenscope_meta WHERE key='schema_version'").fetchone()[0]
    assert version == str(SCHEMA_VERSION)
    raw.close()


def test_sqlite_url_roots(tmp_path, monkeypatch):
    monkeypatch.delenv("LENSCOPE_STORE_ROOT", raising=False)
    with Store(f"sqlite:///{tmp_path}/a/my.db") as beside:
        assert beside.root == tmp_path / "a"
        node = beside.new_node("job")
        beside.put_artifact(node, "f", "f.bin", b"x")
        assert (tmp_path / "a" / "blobs").is_dir()
        reopened_url = beside.url
    with Store(reopened_url) as again:
        assert again.latest() == node and again.artifact(node, "f").content == b"x"
    with Store(f"sqlite:///{tmp_path}/a/my.db?root={tmp_path}/blobs-here") as explicit:
        assert explicit.root == tmp_path / "blobs-here"
        assert "root=" in explicit.url
    monkeypatch.setenv("LENSCOPE_STORE_ROOT", str(tmp_path / "from-env"))
    assert locate(f"sqlite:///{tmp_path}/a/my.db").root == tmp_path / "from-env"


def test_url_refusals(tmp_path, monkeypatch):
    monkeypatch.delenv("LENSCOPE_STORE_ROOT", raising=False)
    with pytest.raises(UsageError, match=r"needs a folder for artifact blobs.*\?root=.*LENSCOPE_STORE_ROOT"):
        Store("postgresql+psycopg://user:secret@127.0.0.1:1/db")
    try:
        Store("postgresql+psycopg://user:secret@127.0.0.1:1/db")
    except UsageError as error:
        assert "secret" not in str(error)
    with pytest.raises(UsageError, match="in-memory"):
        Store("sqlite://")
    with pytest.raises(UsageError, match="bad store URL"):
        Store("::not a url://")


def test_postgres_url_with_root(postgres_url, tmp_path, monkeypatch):
    monkeypatch.setenv("LENSCOPE_STORE_ROOT", str(tmp_path / "shared"))
    with Store(postgres_url) as store:
        assert store.root == tmp_path / "shared"
        node = store.new_node("job")
        store.put_artifact(node, "f", "f.bin", b"pg")
        assert "root=" in store.url
        url = store.url
    monkeypatch.delenv("LENSCOPE_STORE_ROOT")
    with Store(url) as again:
        assert again.artifact(node, "f").content == b"pg"


def _set_version(store_url: str, value: str | None) -> None:
    engine = create_engine(locate(store_url).url)
    with engine.begin() as connection:
        if value is None:
            connection.execute(text("DELETE FROM lenscope_meta"))
        else:
            connection.execute(text("UPDATE lenscope_meta SET value = :v WHERE key = 'schema_version'"), {"v": value})
    engine.dispose()


def test_schema_version_mismatch_is_refused(store_url):
    with Store(store_url) as store:
        node = store.new_node("job")
    _set_version(store_url, "999")
    with pytest.raises(StoreError, match=rf"schema version 999; this lenscope reads version {SCHEMA_VERSION}"):
        Store(store_url)
    with pytest.raises(StoreError, match="schema version 999"):
        Store(store_url, readonly=True).latest()
    _set_version(store_url, str(SCHEMA_VERSION))
    with Store(store_url) as store:
        assert store.latest() == node
    _set_version(store_url, None)
    with pytest.raises(StoreError, match="records no schema_version"):
        Store(store_url)


def test_readonly_open_of_missing_store_creates_nothing(tmp_path):
    reader = Store(tmp_path / "none", readonly=True)
    assert not (tmp_path / "none").exists()
    with pytest.raises(StoreError, match="no lenscope store at .*readonly"):
        reader.latest()
    assert not (tmp_path / "none").exists()
    with Store(tmp_path / "none") as writer:
        node = writer.new_node("job")
    assert reader.latest() == node  # the reader finds the store once process 0 made it
    reader.close()


def test_writers_wait_for_the_lock_instead_of_failing(tmp_path):
    with Store(tmp_path / "s") as store:
        node = store.new_node("job")
        holder = sqlite3.connect(tmp_path / "s" / "lenscope.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        errors: list[BaseException] = []

        def write() -> None:
            try:
                store.record(node, {"x": 1})
            except BaseException as error:
                errors.append(error)

        thread = threading.Thread(target=write)
        thread.start()
        time.sleep(0.5)
        blocked = thread.is_alive()
        holder.execute("COMMIT")
        holder.close()
        thread.join(timeout=60)
        assert blocked, "the write should have waited for the lock held by another connection"
        assert not errors and store.values(node) == {"x": 1}


def test_a_fresh_store_waits_for_a_writer_before_switching_to_wal(tmp_path):
    """Another process's write lock on a fresh database made the switch to WAL fail at once ("database is locked"):
    SQLite takes that lock without the busy handler. Workers started together on a new store hit it (CI)."""
    (tmp_path / "s").mkdir()
    holder = sqlite3.connect(tmp_path / "s" / "lenscope.db", isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    release.start()
    start = time.monotonic()
    with Store(tmp_path / "s") as store:
        waited = time.monotonic() - start
        assert store.new_node("job")
    release.join()
    holder.close()
    assert waited >= 0.25, "the open should have waited for the write lock"
    assert sqlite3.connect(tmp_path / "s" / "lenscope.db").execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_unreachable_database_is_a_store_error(tmp_path):
    with pytest.raises(StoreError, match=r"cannot open store postgresql\+psycopg://u@127.0.0.1:1/db"):
        Store(f"postgresql+psycopg://u@127.0.0.1:1/db?root={tmp_path}")
