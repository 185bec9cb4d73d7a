"""Where `lenscope get -o` writes: a file, or into a folder under the artifact's (re-checked) stored filename.

The stored filename comes from a database someone else may have written (a received store, a shared
PostgreSQL), so it is checked again as a plain name before it names anything. The target is never a
symbolic link, FIFO, device or socket: the file is written under a temporary name and renamed onto the
path the user named, so nothing outside that folder is touched.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from ..errors import UsageError
from ..files import atomic_path, check_plain_name

STDOUT = "-"
_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def checked_filename(filename: str, artifact: str) -> str:
    """The artifact's stored filename if it is still a plain name; else a UsageError naming the artifact."""
    try:
        return check_plain_name(filename, f"{artifact}: its stored filename", filename=True)
    except UsageError as err:
        raise UsageError(f"{err} (a store written by lenscope never holds one: it may have been altered)") from None


def output_path(option: str, filename: str) -> Path | None:
    """The file `-o option` means (None: stdout): `DIR/` or an existing folder takes the artifact's filename."""
    if option == STDOUT:
        return None
    named = Path(option)
    if option.endswith(("/", os.sep)) or named.is_dir():
        if not named.is_dir():
            state = "is not a folder" if named.exists() else "does not exist"
            raise UsageError(f"cannot write into {option!r}: it {state} (a trailing '/' means 'into this folder'; "
                             "create it first, or drop the '/' to name the file)")
        target = named / filename
    else:
        target = named
        if not target.parent.is_dir():
            raise UsageError(f"cannot write {option!r}: folder {str(target.parent)!r} does not exist")
    _refuse_special(target)
    return target


def _refuse_special(target: Path) -> None:
    """Only a regular file (or nothing) may sit at the target: a link, FIFO or device is never replaced."""
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    for test, kind in _KINDS:
        if test(mode):
            also = f" to {os.readlink(target)!r}" if stat.S_ISLNK(mode) else ""
            raise UsageError(f"refusing to write {str(target)!r}: it is {kind}{also}, not a regular file; "
                             f"lenscope never replaces one (name a regular file, or use -o {STDOUT} for stdout)")


def write_output(target: Path, chunks: Iterable[bytes]) -> int:
    """Write the pieces to `target` atomically (a temporary sibling renamed onto it); returns the byte count.

    The pieces are written as they come (bounded memory for a large artifact); a refusal is a UsageError.
    """
    written = 0
    try:
        with atomic_path(target) as tmp, open(tmp, "wb") as handle:
            for piece in chunks:
                handle.write(piece)
                written += len(piece)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as err:
        raise UsageError(f"cannot write {str(target)!r}: {err.strerror or err}") from None
    return written
