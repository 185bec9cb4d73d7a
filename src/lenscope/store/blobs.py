"""Content-addressed blob folder: artifact bytes stored once by SHA-256, written atomically (S4)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from lenscope.errors import StoreError, UsageError
from lenscope.files import write_atomic

CHUNK = 1 << 20  # bytes read at a time when a blob is streamed


class Payload(Mapping):
    """An artifact's file: its plain filename and exact bytes; reads as `p.content` or `p["content"]`.

    A payload read from a store loads its bytes (checked against their SHA-256) on first access to
    `content`: listing artifacts reads no blob, and a damaged blob fails only the artifact that uses it.
    """

    __slots__ = ("_filename", "_content", "_size", "_load", "_stream")

    def __init__(self, filename: str, content: bytes | None = None, *, size: int | None = None,
                 load: Callable[[], bytes] | None = None,
                 stream: Callable[[], Iterable[bytes]] | None = None) -> None:
        if (content is None) == (load is None):
            raise UsageError("Payload needs exactly one of content or load")
        self._filename = filename
        self._content = content
        self._size = len(content) if content is not None else size
        self._load = load
        self._stream = stream

    @classmethod
    def stored(cls, filename: str, blobs: BlobFolder, digest: str, size: int, what: str) -> Payload:
        """The payload of stored artifact `what` whose bytes are read from `blobs` when first wanted."""
        return cls(filename, size=size, load=lambda: blobs.get(digest, size, what),
                   stream=lambda: blobs.chunks(digest, size, what))

    def chunks(self) -> Iterable[bytes]:
        """The exact bytes in pieces, read and checked as they go (bounded memory for a large stored payload)."""
        if self._content is None and self._stream is not None:
            return self._stream()
        return (self.content,)

    @property
    def filename(self) -> str:
        """The artifact's plain file name."""
        return self._filename

    @property
    def size(self) -> int | None:
        """The content's length in bytes, known without reading it."""
        return self._size

    @property
    def content(self) -> bytes:
        """The exact bytes (read and checked on first access for a stored payload)."""
        if self._content is None:
            self._content = self._load()
        return self._content

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
        return f"Payload(filename={self.filename!r}, content=<{self.size} bytes>)"


def as_bytes(content: object, what: str) -> bytes:
    """`content` as bytes (bytes, bytearray or memoryview); a UsageError naming `what` otherwise."""
    if isinstance(content, bytes):
        return content
    if isinstance(content, (bytearray, memoryview)):
        return bytes(content)
    raise UsageError(f"{what}: content must be bytes, got {type(content).__name__}")


def artifact_label(node: object, name: str, version: int) -> str:
    """How messages name one artifact version: `artifact 'fourier' version 2 on grokking.train@7f3a2c:12`."""
    return f"artifact {name!r} version {version} on {node}"


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
        """Store several contents, each once; the folders are synced once at the end. Returns digests.

        A blob already on disk is kept only if its bytes are these bytes: a damaged one is rewritten.
        """
        digests = [sha256(content) for content in contents]
        touched: set[Path] = set()
        for digest, content in dict(zip(digests, contents)).items():
            target = self.path(digest)
            if _holds(target, content):
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

    def ensure(self, digest: str, content: bytes) -> None:
        """Write blob `digest` again if it vanished (a concurrent `gc` removed it as unreferenced)."""
        target = self.path(digest)
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(target, content)
            _fsync_dir(target.parent)

    def get(self, digest: str, size: int, what: str = "") -> bytes:
        """The bytes of blob `digest`, checked against its recorded size and hash; `what` names the reader."""
        with self._open(digest, size, what) as handle:
            content = handle.read()
        if len(content) != size or sha256(content) != digest:
            raise self._corrupt(digest, what)
        return content

    def chunks(self, digest: str, size: int, what: str = "", chunk: int = CHUNK) -> Iterator[bytes]:
        """The bytes of blob `digest` in pieces of `chunk` bytes, hashed as they are read: bounded memory.

        The last piece is held back until the whole blob matched its size and SHA-256, so a reader of a
        corrupt blob gets a StoreError (a download: a cut-short body), never silently wrong bytes.
        """
        handle = self._open(digest, size, what)
        with handle:
            hasher, held, read = hashlib.sha256(), None, 0
            while piece := handle.read(chunk):
                hasher.update(piece)
                read += len(piece)
                if held is not None:
                    yield held
                held = piece
            if read != size or hasher.hexdigest() != digest:
                raise self._corrupt(digest, what)
            if held is not None:
                yield held

    def head(self, digest: str, size: int, count: int, what: str = "") -> bytes:
        """The first `count` bytes of blob `digest` (for a preview; its size is checked, its hash trusted)."""
        with self._open(digest, size, what) as handle:
            return handle.read(count)

    def _open(self, digest: str, size: int, what: str):
        target = self.path(digest)
        where = f"{what}: " if what else ""
        try:
            handle = open(target, "rb")  # noqa: SIM115 (the caller closes it: returned open)
        except FileNotFoundError:
            raise StoreError(f"{where}blob {digest} is missing from {self.root} (run `lenscope fsck`)") from None
        if os.fstat(handle.fileno()).st_size != size:
            handle.close()
            raise self._corrupt(digest, what)
        return handle

    def _corrupt(self, digest: str, what: str) -> StoreError:
        where = f"{what}: " if what else ""
        return StoreError(f"{where}blob {self.path(digest)} is corrupt: its bytes do not match the recorded SHA-256 "
                          "and size (run `lenscope fsck`; putting the same bytes again heals it)")


def _holds(target: Path, content: bytes) -> bool:
    """Whether the file `target` exists with exactly `content` (size first, then the bytes)."""
    try:
        if target.stat().st_size != len(content):
            return False
        return target.read_bytes() == content
    except OSError:
        return False


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
