"""Where a store lives (URL or folder), its SQLAlchemy engine, and the schema-version check (S7, S8)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, insert, inspect, select
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, ProgrammingError

from lenscope.errors import StoreError, UsageError
from lenscope.store.schema import SCHEMA_VERSION, meta, metadata

DB_FILE = "lenscope.db"
BUSY_TIMEOUT_S = 30.0
WRITE = "lenscope_write"  # connection execution option: this transaction writes


@dataclass(frozen=True)
class Location:
    """A resolved store: the database URL, the folder for blobs and checkpoints, and the SQLite file if any."""

    url: URL
    root: Path
    sqlite_file: Path | None

    @property
    def text(self) -> str:
        """A URL string that reopens this same store (root= added where it is not the derived default)."""
        url = self.url
        if self.sqlite_file is None or self.root != self.sqlite_file.parent:
            url = url.update_query_dict({"root": str(self.root)})
        return url.render_as_string(hide_password=False)

    @property
    def shown(self) -> str:
        """The location for messages: the folder for folder stores, the URL without password otherwise."""
        if self.sqlite_file is not None and self.sqlite_file == self.root / DB_FILE:
            return str(self.root)
        return self.url.render_as_string(hide_password=True)


def locate(url_or_root: str | os.PathLike | None) -> Location:
    """Resolve `Store(url_or_root)`: None -> $LENSCOPE_STORE or ./runs; a folder; or a SQLAlchemy URL."""
    if url_or_root is None:
        url_or_root = os.environ.get("LENSCOPE_STORE") or "./runs"
    if isinstance(url_or_root, os.PathLike) or "://" not in str(url_or_root):
        root = Path(url_or_root).expanduser().absolute()
        file = root / DB_FILE
        return Location(URL.create("sqlite", database=str(file)), root, file)
    text = str(url_or_root)
    try:
        url = make_url(text)
    except ArgumentError:
        raise UsageError(
            f"bad store URL {text!r}: expected a folder or a SQLAlchemy URL like sqlite:///runs/lenscope.db"
        ) from None
    root_text = url.query.get("root") or os.environ.get("LENSCOPE_STORE_ROOT")
    if isinstance(root_text, tuple):
        root_text = root_text[-1]
    url = url.difference_update_query(["root"])
    if url.get_backend_name() == "sqlite":
        database = url.database or ""
        if database in ("", ":memory:") or url.query.get("mode") == "memory":
            raise UsageError(
                f"store URL {text!r} is an in-memory SQLite database; "
                "give a file (sqlite:///path/lenscope.db) or a folder"
            )
        file = Path(database).expanduser().absolute()
        url = url.set(database=str(file))
        return Location(url, Path(root_text).expanduser().absolute() if root_text else file.parent, file)
    if not root_text:
        raise UsageError(
            f"store URL {url.render_as_string(hide_password=True)!r} needs a folder for artifact blobs and "
            "checkpoints: "
            "add ?root=/shared/folder to the URL or set $LENSCOPE_STORE_ROOT"
        )
    return Location(url, Path(root_text).expanduser().absolute(), None)


def _sqlite_on_connect(readonly: bool):
    def on_connect(dbapi_connection, _record) -> None:
        # Let SQLAlchemy's begin hook below issue BEGIN itself instead of pysqlite's implicit one.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA case_sensitive_like = ON")  # LIKE as on PostgreSQL
        if not readonly:
            cursor.execute("PRAGMA journal_mode = WAL")
            # WAL + NORMAL: a killed process loses no committed transaction; the DB never tears.
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    return on_connect


def _sqlite_on_begin(connection) -> None:
    # Writers take the write lock up front so two writers never deadlock upgrading read locks.
    mode = "BEGIN IMMEDIATE" if connection.get_execution_options().get(WRITE) else "BEGIN"
    connection.exec_driver_sql(mode)


def make_engine(location: Location, readonly: bool) -> Engine:
    """An engine for `location`; SQLite connections get WAL, a busy timeout and BEGIN IMMEDIATE writes."""
    if location.sqlite_file is None:
        return create_engine(location.url, pool_pre_ping=True)
    engine = create_engine(location.url, connect_args={"timeout": BUSY_TIMEOUT_S})
    event.listen(engine, "connect", _sqlite_on_connect(readonly))
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _stored_version(connection) -> str | None:
    if not inspect(connection).has_table(meta.name):
        return None
    row = connection.execute(select(meta.c.value).where(meta.c.key == "schema_version")).first()
    if row is None:
        raise StoreError(f"table {meta.name} exists but records no schema_version; this is not a lenscope store")
    return row.value


def prepare(engine: Engine, location: Location, readonly: bool) -> None:
    """Create the tables in a new store (unless readonly) and refuse a store of another schema version."""
    for attempt in range(3):
        try:
            with engine.connect() as connection:
                connection.execution_options(**{WRITE: not readonly})
                with connection.begin():
                    version = _stored_version(connection)
                    if version is None:
                        if readonly:
                            raise StoreError(
                                f"no lenscope store at {location.shown} (opened readonly: none is created)")
                        metadata.create_all(connection)
                        connection.execute(insert(meta).values(key="schema_version", value=str(SCHEMA_VERSION)))
                        return
            break
        except (IntegrityError, ProgrammingError):
            # Another process created the tables at the same moment (PostgreSQL); look again.
            if attempt == 2:
                raise
        except DBAPIError as error:
            raise StoreError(f"cannot open store {location.shown}: {error.orig}") from error
    if version != str(SCHEMA_VERSION):
        raise StoreError(
            f"store at {location.shown} has schema version {version}; this lenscope reads version {SCHEMA_VERSION} "
            "(open it with a matching lenscope, or use a new store folder/URL)"
        )
