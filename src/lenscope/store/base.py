"""Opening a store, its transactions, and turning node addresses into row ids (shared by the Store parts)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Connection, Engine, or_, select, tuple_
from sqlalchemy.exc import OperationalError

from lenscope.errors import StoreError, UsageError, hint
from lenscope.store.blobs import BlobFolder
from lenscope.store.engine import WRITE, Location, NotCreated, check_writable, locate, make_engine, prepare
from lenscope.store.node import Node
from lenscope.store.schema import nodes

NodeLike = Node | str
T = TypeVar("T")
IN_LIST_SIZE = 300  # values per IN (...) list, well under every backend's bound-parameter limit


class StoreBase:
    """Connection handling shared by the Store: lazy engine, read/write transactions, node lookup."""

    def __init__(self, url_or_root: str | os.PathLike | None = None, *, readonly: bool = False) -> None:
        self._location: Location = locate(url_or_root)
        self.readonly: bool = bool(readonly)
        self.root: Path = self._location.root
        self.url: str = self._location.text
        self.blobs = BlobFolder(self.root / "blobs")
        self._engine_: Engine | None = None
        if not self.readonly:
            self.root.mkdir(parents=True, exist_ok=True)
            if self._location.sqlite_file is not None:
                self._location.sqlite_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            if not self.readonly or self._location.sqlite_file is None or self._location.sqlite_file.exists():
                self._engine()
        except NotCreated:
            if not self.readonly:
                raise
            # an empty database: process 0 of a job may still be creating it, so a readonly open retries on first use

    def _engine(self) -> Engine:
        """The engine, created (and the schema checked) on first use."""
        if self._engine_ is None:
            file = self._location.sqlite_file
            if self.readonly and file is not None and not file.exists():
                raise StoreError(f"no lenscope store at {self._location.shown} (opened readonly, so none is created)")
            engine = make_engine(self._location, self.readonly)
            try:
                prepare(engine, self._location, self.readonly)
            except BaseException:
                engine.dispose()
                raise
            self._engine_ = engine
        return self._engine_

    def close(self) -> None:
        """Release the database connections (the store can be reopened any time)."""
        if self._engine_ is not None:
            self._engine_.dispose()
            self._engine_ = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = ", readonly" if self.readonly else ""
        return f"Store({self._location.shown!r}{mode})"

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction: one consistent snapshot for several statements."""
        try:
            with self._engine().connect() as connection, connection.begin():
                yield connection
        except OperationalError as error:
            raise StoreError(f"store {self._location.shown}: {error.orig}") from error

    def checkpoint_path(self, stored: str | None) -> Path | None:
        """The checkpoint folder for a node row's stored checkpoint column (relative to the root unless absolute)."""
        return None if stored is None else self.root / stored

    @contextmanager
    def _write(self, what: str) -> Iterator[Connection]:
        """A write transaction (BEGIN IMMEDIATE on SQLite); refused on a readonly store."""
        self._check_writable(what)
        try:
            with self._engine().connect() as connection:
                connection.execution_options(**{WRITE: True})
                with connection.begin():
                    yield connection
        except OperationalError as error:
            raise StoreError(f"store {self._location.shown}: {error.orig}") from error

    def _check_writable(self, what: str) -> None:
        if self.readonly:
            raise StoreError(f"{what} refused: store {self._location.shown} is open readonly (only process 0 writes)")
        check_writable(self._location)  # a store in a folder this process cannot write

    def _node_id(self, connection: Connection, node: NodeLike) -> int:
        """Row id of `node`; a StoreError naming it and the nearest known addresses when absent."""
        node = Node.coerce(node)
        row = connection.execute(
            select(nodes.c.id).where(nodes.c.name == node.name, nodes.c.nonce == node.nonce, nodes.c.seq == node.seq)
        ).first()
        if row is None:
            raise StoreError(f"unknown node {node}" + self._nearby(connection, node))
        return row.id

    def _node_ids(self, connection: Connection, wanted: Iterable[NodeLike]) -> dict[Node, int]:
        """Row ids of several nodes at once (chunked IN lists); StoreError on the first unknown one."""
        unique = list(dict.fromkeys(Node.coerce(node) for node in wanted))
        found: dict[Node, int] = {}
        key = tuple_(nodes.c.name, nodes.c.nonce, nodes.c.seq)
        for chunk in in_lists(unique):
            rows = connection.execute(
                select(nodes.c.id, nodes.c.name, nodes.c.nonce, nodes.c.seq).where(
                    key.in_([(n.name, n.nonce, n.seq) for n in chunk])
                )
            )
            found.update({Node(r.name, r.nonce, r.seq): r.id for r in rows})
        for node in unique:
            if node not in found:
                raise StoreError(f"unknown node {node}" + self._nearby(connection, node))
        return found

    def _nearby(self, connection: Connection, node: Node) -> str:
        rows = connection.execute(
            select(nodes.c.name, nodes.c.nonce, nodes.c.seq)
            .where(or_(nodes.c.nonce == node.nonce, nodes.c.name == node.name))
            .order_by(nodes.c.id.desc())
            .limit(200)
        )
        return hint(node.address, [Node(r.name, r.nonce, r.seq).address for r in rows])


def in_lists(items: Sequence[T]) -> Iterator[Sequence[T]]:
    """`items` in consecutive slices of at most IN_LIST_SIZE, one per IN (...) list."""
    for start in range(0, len(items), IN_LIST_SIZE):
        yield items[start : start + IN_LIST_SIZE]


def check_name(value: object, what: str) -> str:
    """A non-empty string of at most 200 characters without NUL; a UsageError naming `what` otherwise."""
    if not isinstance(value, str) or not value or len(value) > 200 or "\x00" in value:
        raise UsageError(f"{what} {value!r} refused: expected a non-empty string of at most 200 characters")
    return value


def as_nodes(items: Sequence[NodeLike], what: str) -> list[Node]:
    """Nodes from a sequence of Nodes or addresses (a lone Node or string counts as one)."""
    if isinstance(items, (Node, str)):
        items = [items]
    try:
        return [Node.coerce(item) for item in items]
    except TypeError:
        raise UsageError(f"{what}: expected nodes or node addresses, got {type(items).__name__}") from None
