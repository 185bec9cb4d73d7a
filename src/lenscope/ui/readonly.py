"""The UI's store handle: opened readonly, and every read transaction is read-only in the database too."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Connection
from sqlalchemy.engine import make_url

from lenscope.store import Store
from lenscope.store.blobs import BlobFolder
from lenscope.store.engine import DB_FILE


class ReadOnlyStore:
    """A `StoreReader` over a readonly `Store` whose transactions the database itself refuses to write in.

    `Store(readonly=True)` refuses writes in Python; on top of that each transaction starts with
    `PRAGMA query_only` (SQLite) or `SET TRANSACTION READ ONLY` (PostgreSQL), so no statement the UI
    runs can change data, whatever it is.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.blobs: BlobFolder = store.blobs

    @classmethod
    def open(cls, url_or_root: str | os.PathLike | None) -> ReadOnlyStore:
        """Open the store at `url_or_root` (a folder or URL; None: $LENSCOPE_STORE or ./runs) for reading only."""
        return cls(Store(url_or_root, readonly=True))

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction: one consistent snapshot."""
        with self.store.read() as connection:
            if connection.dialect.name == "sqlite":
                connection.exec_driver_sql("PRAGMA query_only = ON")
            else:
                connection.exec_driver_sql("SET TRANSACTION READ ONLY")
            yield connection

    def checkpoint_path(self, stored: str | None) -> Path | None:
        """The checkpoint folder for a node row's stored checkpoint column."""
        return self.store.checkpoint_path(stored)

    @property
    def shown(self) -> str:
        """The store's location for messages and page titles (no password)."""
        url = make_url(self.store.url)
        if url.get_backend_name() == "sqlite" and "root" not in url.query and url.database:
            return str(Path(url.database).parent) if Path(url.database).name == DB_FILE else url.database
        return url.render_as_string(hide_password=True)

    def close(self) -> None:
        """Release the database connections."""
        self.store.close()
