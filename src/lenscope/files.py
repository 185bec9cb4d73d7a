"""Atomic file writes: a temporary name in the target folder, then a rename, so readers never see half a file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """Yield a temporary sibling of `path` to write; it replaces `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: Path | str, content: bytes, *, sync: bool = True) -> Path:
    """Write `content` to `path` through a temporary sibling (fsynced) and an atomic rename; returns the path."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            handle.write(content)
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
    return Path(path)


def is_plain_name(name: object) -> bool:
    """Whether `name` can name a file by itself: a nonempty string without separators, NUL or '..'."""
    return isinstance(name, str) and bool(name) and not any(c in name for c in "/\\\0") and ".." not in name
