"""The read side of a store that a Query runs on: the seam that keeps query.py from importing store.py."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from sqlalchemy import Connection

from lenscope.store.blobs import BlobFolder


class StoreReader(Protocol):
    """Read transactions, blob bytes and checkpoint folders; the Store is the implementation."""

    @property
    def blobs(self) -> BlobFolder:
        """The content-addressed folder holding artifact bytes."""
        ...

    def read(self) -> AbstractContextManager[Connection]:
        """A read transaction: one consistent snapshot for several statements."""
        ...

    def checkpoint_path(self, stored: str | None) -> Path | None:
        """The checkpoint folder for a node row's stored checkpoint column (None when it has none)."""
        ...
