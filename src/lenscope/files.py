"""Files: atomic writes (a temporary sibling, then a rename, so readers never see half a file) and plain names."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import UsageError


def umask() -> int:
    """The process's file-creation mask, read without changing it (os.umask alone sets it, racing other threads)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # no /proc (not Linux): set and restore at once
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """Yield a temporary sibling of `path` to write; it replaces `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.fchmod(fd, 0o666 & ~umask())  # mkstemp makes 0600; a written file gets the mode open() would give it
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: Path | str, content: bytes, *, sync: bool = True) -> Path:
    """Write `content` to `path` through a temporary sibling (fsynced) and an atomic rename; returns the path."""
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        handle.write(content)
        handle.flush()
        if sync:
            os.fsync(handle.fileno())
    return Path(path)


MAX_NAME = 255  # the longest file name most file systems take


def _plain_name_problem(value: object) -> str | None:
    """Why `value` cannot name a file by itself (in a folder, as an artifact), or None when it can."""
    if not isinstance(value, str):
        return f"it is not a string but a {type(value).__name__}"
    if not value:
        return "it is empty"
    if "/" in value or "\\" in value:
        return "it contains a path separator ('/' or '\\')"
    if ".." in value:
        return "it contains '..'"
    if "\0" in value:
        return "it contains a NUL character"
    if value == ".":
        return "it is '.'"
    if len(value) > MAX_NAME:
        return f"it is longer than {MAX_NAME} characters"
    return None


def check_plain_name(value: object, what: str, error: type[Exception] = UsageError) -> str:
    """`value` if it is a plain name (names a file by itself); else `error` naming `what` and the broken rule."""
    problem = _plain_name_problem(value)
    if problem is not None:
        raise error(f"{what} must be a nonempty plain name; {value!r} is refused: {problem}")
    return value
