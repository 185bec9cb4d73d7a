"""Content-addressed blob folder: artifact bytes stored once by SHA-256, written atomically (S4)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lenscope.errors import StoreError, UsageError
from lenscope.files import write_atomic


@dataclass(frozen=True, eq=False)
class Payload(Mapping):
    """An artifact's file: its plain filename and exact bytes; reads as `p.content` or `p["content"]`."""

    filename: str
    content: bytes

    def __getitem__(self, key: str) -> Any:
        if key == "filename":
            return self.filename
        if key == "content":
            return self.content
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(("filename", "content"))

    def __len__(self) -> int:
        return 2

    def __repr__(self) -> str:
        return f"Payload(filename={self.filename!r}, content=<{len(self.content)} bytes>)"


def as_bytes(content: object, what: str) -> bytes:
    """`content` as bytes (bytes, bytearray or memoryview); a UsageError naming `what` otherwise."""
    if isinstance(content, bytes):
        return content
    if isinstance(content, (bytearray, memoryview)):
        return bytes(content)
    raise UsageError(f"{what}: content must be bytes, got {type(content).__name__}")


def sha256(content: bytes) -> str:
    """Hex SHA-256 of `content`, the blob's address."""
    return hashlib.sha256(content).hexdigest()


class BlobFolder:
    """A folder of immutable files named by their SHA-256 (`<root>/<2 hex>/<64 hex>`)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, digest: str) -> Path:
        """Where the blob with this digest lives."""
        return self.root / digest[:2] / digest

    def put(self, content: bytes) -> str:
        """Store `content` once (temp file + fsync + rename in the same folder); return its digest."""
        return self.put_many([content])[0]

    def put_many(self, contents: list[bytes]) -> list[str]:
        """Store several contents, each once; the folders are synced once at the end. Returns digests."""
        digests, touched = [], set()
        for content in contents:
            digest = sha256(content)
            digests.append(digest)
            target = self.path(digest)
            if target.is_file() and target.stat().st_size == len(content):
                continue
            folder = target.parent
            if not folder.is_dir():
                folder.mkdir(parents=True, exist_ok=True)
                touched.add(folder.parent)
            write_atomic(target, content)
            touched.add(folder)
        for folder in sorted(touched):
            _fsync_dir(folder)
        return digests

    def get(self, digest: str, size: int) -> bytes:
        """The bytes of blob `digest`, checked against its recorded size and hash."""
        target = self.path(digest)
        try:
            content = target.read_bytes()
        except FileNotFoundError:
            raise StoreError(f"blob {digest} is missing from {self.root}") from None
        if len(content) != size or sha256(content) != digest:
            raise StoreError(f"blob {target} is corrupt: its bytes do not match the recorded SHA-256 and size")
        return content


def _fsync_dir(folder: Path) -> None:
    """Make a rename or a new entry in `folder` durable (no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
