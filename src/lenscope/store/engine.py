"""Where a store lives (URL or folder), its SQLAlchemy engine, and the schema-version check (S7, S8).

An SQLite store this process cannot write (a read-only mount, a colleague's folder, a copy without
write permission) is opened read-only in a mode SQLite can serve without creating its WAL index
(`mode=ro`, else `immutable=1`), with a one-line note; writing to it is refused with a clear error.
A damaged database file is reported in one line that suggests `lenscope fsck`.
"""

from __future__ import annotations

import os
import re
import sqlite3
import sys
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, insert, inspect, select
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, ProgrammingError

from lenscope.errors import StoreError, StoreInputError, UsageError
from lenscope.store.migrate import upgrade
from lenscope.store.schema import SCHEMA_VERSION, meta, metadata

DB_FILE = "lenscope.db"
BUSY_TIMEOUT_S = 30.0
WRITE = "lenscope_write"  # connection execution option: this transaction writes
_NOTED: set[str] = set()  # read-only stores this process has said so about
_DAMAGED = re.compile(r"malformed|not a database|corrupt", re.IGNORECASE)  # SQLite's words for a damaged file


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
        if not readonly and _ours_or_empty(cursor):  # never switch someone else's database to WAL
            _switch_to_wal(cursor)
            # WAL + NORMAL: a killed process loses no committed transaction; the DB never tears.
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    return on_connect


def _switch_to_wal(cursor) -> None:
    """`PRAGMA journal_mode = WAL`, retried while another process holds a lock: SQLite takes the exclusive lock this
    switch needs without calling the busy handler, so processes opening a fresh store together saw "locked"."""
    deadline, delay = time.monotonic() + BUSY_TIMEOUT_S, 0.001
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(2 * delay, 0.05)


def _ours_or_empty(cursor) -> bool:
    """Whether an SQLite database holds a lenscope store or no tables at all (prepare() refuses the others)."""
    cursor.execute("SELECT count(*), count(CASE WHEN name = ? THEN 1 END) FROM sqlite_master WHERE type = 'table'",
                   (meta.name,))
    tables, ours = cursor.fetchone()
    return tables == 0 or ours > 0


def _sqlite_on_begin(connection) -> None:
    # Writers take the write lock up front so two writers never deadlock upgrading read locks.
    mode = "BEGIN IMMEDIATE" if connection.get_execution_options().get(WRITE) else "BEGIN"
    connection.exec_driver_sql(mode)


def read_only_reason(location: Location) -> str | None:
    """Why this process cannot write the existing SQLite store at `location`, or None (it can, or it is not SQLite)."""
    file = location.sqlite_file
    if file is None or not file.exists():
        return None
    if not os.access(file.parent, os.W_OK):  # also False on a read-only mount, even for root
        return f"its folder {file.parent} is not writable"
    if not os.access(file, os.W_OK):
        return f"{file} is not writable"
    return None


def _read_only_connect(file: Path) -> tuple[Callable[[], sqlite3.Connection], str]:
    """A connect function for a store that cannot be written, and its mode: `mode=ro` when SQLite can read the
    database that way (its WAL index exists), else `immutable=1` (no locks, no WAL: nobody may write meanwhile)."""
    uri = f"file:{urllib.parse.quote(str(file))}?mode=ro"

    def connect(query: str) -> sqlite3.Connection:
        return sqlite3.connect(query, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False)

    try:
        probe = connect(uri)
        try:
            probe.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            probe.close()
        return (lambda: connect(uri)), "mode=ro"
    except sqlite3.Error:
        return (lambda: connect(uri + "&immutable=1")), "immutable=1"


def _read_only_error(location: Location, reason: str) -> StoreInputError:
    return StoreInputError(
        f"store {location.shown} is read-only here ({reason}): writing to it is refused; copy it to a "
        "writable folder, or send results to another store (AnalysisCfg output_store)")


def check_writable(location: Location) -> None:
    """Refuse a write to a store this process cannot write, before any blob or row is (StoreInputError, exit 2)."""
    reason = read_only_reason(location)
    if reason is not None:
        raise _read_only_error(location, reason)


def _refuse_writes(location: Location, reason: str):
    def on_begin(connection) -> None:
        if connection.get_execution_options().get(WRITE):
            raise _read_only_error(location, reason)
        connection.exec_driver_sql("BEGIN")

    return on_begin


def _report_damage(location: Location):
    def on_error(context) -> None:
        error = context.original_exception
        if isinstance(error, sqlite3.DatabaseError) and _DAMAGED.search(str(error)):
            raise StoreInputError(
                f"store {location.shown} is damaged or not an SQLite database ({error}); "
                f"check it with `lenscope fsck --store {location.shown}`") from None

    return on_error


def make_engine(location: Location, readonly: bool) -> Engine:
    """An engine for `location`; SQLite connections get WAL, a busy timeout and BEGIN IMMEDIATE writes.

    An existing SQLite store this process cannot write opens read-only (see the module docstring).
    """
    if location.sqlite_file is None:
        return create_engine(location.url, pool_pre_ping=True)
    reason = read_only_reason(location)
    if reason is None:
        engine = create_engine(location.url, connect_args={"timeout": BUSY_TIMEOUT_S})
        event.listen(engine, "connect", _sqlite_on_connect(readonly))
        event.listen(engine, "begin", _sqlite_on_begin)
    else:
        connect, mode = _read_only_connect(location.sqlite_file)
        wal = location.sqlite_file.with_name(location.sqlite_file.name + "-wal")
        unseen = " (its -wal file is not read in this mode)" if mode.startswith("immutable") and wal.exists() else ""
        if location.shown not in _NOTED:  # once per process; a plain line, as logging's format varies
            _NOTED.add(location.shown)
            print(f"note: store {location.shown} is read-only here ({reason}): opened read-only ({mode}){unseen}",
                  file=sys.stderr, flush=True)
        engine = create_engine(location.url, creator=connect)
        event.listen(engine, "connect", _sqlite_on_connect(True))
        event.listen(engine, "begin", _refuse_writes(location, reason))
    event.listen(engine, "handle_error", _report_damage(location))
    return engine


def _stored_version(connection) -> str | None:
    if not inspect(connection).has_table(meta.name):
        return None
    row = connection.execute(select(meta.c.value).where(meta.c.key == "schema_version")).first()
    if row is None:
        raise StoreInputError(f"table {meta.name} exists but records no schema_version; this is not a lenscope store")
    return row.value


def _refuse_foreign(connection, location: Location) -> None:
    """An SQLite file that holds other tables and no lenscope store is someone else's database: never extend it."""
    if location.sqlite_file is None:
        return  # a PostgreSQL database is often shared with other applications' tables
    tables = sorted(inspect(connection).get_table_names())
    if tables:
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise StoreInputError(
            f"{location.sqlite_file} is an SQLite database of something else (tables: {shown}) without a lenscope "
            "store in it; lenscope adds no tables to it: give a new store folder or file")


class NotCreated(StoreError):
    """A readonly open found no lenscope schema and no other tables: nothing, or a store still being created."""


def prepare(engine: Engine, location: Location, readonly: bool) -> None:
    """Create the tables in a new store (unless readonly) and refuse a store of another schema version."""
    if not readonly and read_only_reason(location) is not None:
        readonly = True  # make_engine opened it read-only; writes are refused when they come
    for attempt in range(3):
        try:
            with engine.connect() as connection:
                connection.execution_options(**{WRITE: not readonly})
                with connection.begin():
                    version = _stored_version(connection)
                    if version is None:
                        _refuse_foreign(connection, location)
                        if readonly:
                            raise NotCreated(
                                f"no lenscope store at {location.shown} (opened readonly: none is created)")
                        metadata.create_all(connection)
                        connection.execute(insert(meta).values(key="schema_version", value=str(SCHEMA_VERSION)))
                        return
                    if version != str(SCHEMA_VERSION):
                        version = upgrade(connection, version, readonly=readonly, shown=location.shown)
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
