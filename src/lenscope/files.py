"""Files: atomic writes (a temporary sibling, then a rename, so readers never see half a file) and plain names."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


_TEMP_SUFFIX = ".tmp"
_TEMP_OVERHEAD = len("..") + 8 + len(_TEMP_SUFFIX)  # ".NAME." + mkstemp's 8 random characters + ".tmp"


@contextmanager
def atomic_path(path: Path | str, *, private: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling of `path` to write; it replaces `path` only if the block succeeds, and is removed
    if it fails (a full disk leaves no temporary behind). `private`: the file stays readable by this user only."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=_TEMP_SUFFIX)
    if not private:
        os.fchmod(fd, 0o666 & ~umask())  # mkstemp makes 0600; a written file gets the mode open() would give it
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: Path | str, content: bytes, *, sync: bool = True, private: bool = False) -> Path:
    """Write `content` to `path` through a temporary sibling (fsynced) and an atomic rename; returns the path."""
    with atomic_path(path, private=private) as tmp, open(tmp, "wb") as handle:
        handle.write(content)
        handle.flush()
        if sync:
            os.fsync(handle.fileno())
    return Path(path)


@contextmanager
def staged_folder(folder: Path | str, what: str = "the folder") -> Iterator[Path]:
    """Yield a path (not yet made) inside a new private staging folder beside `folder` for the block to fill; after
    the block it becomes `folder`, and on any failure (a full disk included) the staging folder and all in it go.

    The staging folder's name is unique (mkdtemp), so nothing of the user's beside `folder` is ever touched. `folder`
    must be new or an empty folder, and not a symbolic link (dangling or not): a UsageError naming it, before
    anything is written."""
    folder = Path(folder)
    if folder.is_symlink():
        raise UsageError(f"{what} {folder} is a symbolic link; give a new folder (not a link) to write into")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise UsageError(f"{what} {folder} exists and is not an empty folder; give a new folder to write into")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name[:200]}.", suffix=".partial"))
    try:
        inner = staging / "content"
        yield inner
        if not inner.is_dir():
            raise FileNotFoundError(f"nothing was written for {folder}")
        inner.chmod(0o777 & ~umask())
        if folder.is_dir() and not folder.is_symlink():
            folder.rmdir()  # the empty folder the user gave: replaced by the filled one
        os.rename(inner, folder)
        staging.rmdir()
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


MAX_FILENAME_BYTES = 255 - _TEMP_OVERHEAD
"""The longest file name lenscope writes: its temporary sibling (atomic_path) must fit in 255 bytes too."""
LONGEST_DERIVED_SUFFIX = ".error.txt"  # the longest suffix lenscope adds to a name (NAME.error.txt, NAME.parquet)
MAX_NAME_BYTES = MAX_FILENAME_BYTES - len(LONGEST_DERIVED_SUFFIX)
"""The longest name (analysis NAME, AnalysisCfg name) in bytes: every file named after it fits."""
MAX_NAME_CHARS = 200  # a name is also an artifact name: the store's name columns hold 200 characters


def _plain_name_problem(value: object, filename: bool) -> str | None:
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
    try:
        size = len(os.fsencode(value))
    except UnicodeError:
        return "it cannot be encoded as a file name (lone surrogate characters)"
    if filename and size > MAX_FILENAME_BYTES:
        return (f"it is {size} bytes long (UTF-8); a file name may take at most {MAX_FILENAME_BYTES} bytes, "
                f"leaving room for a temporary suffix in a 255-byte file name")
    if not filename and size > MAX_NAME_BYTES:
        return (f"it is {size} bytes long (UTF-8); a name may take at most {MAX_NAME_BYTES} bytes, leaving room "
                f"for '{LONGEST_DERIVED_SUFFIX}' and a temporary suffix in a 255-byte file name")
    if not filename and len(value) > MAX_NAME_CHARS:
        return f"it is {len(value)} characters long; a name (also an artifact name) may take at most {MAX_NAME_CHARS}"
    return None


def check_plain_name(value: object, what: str, error: type[Exception] = UsageError, *, filename: bool = False) -> str:
    """`value` if it is a plain name (names a file by itself); else `error` naming `what` and the broken rule.

    The one check of names that become files, made where they are declared, before anything runs, with
    lengths in bytes as file systems count them: a name (analysis NAME, AnalysisCfg name), from which
    lenscope derives file names (NAME.json, NAME.error.txt) and an artifact name, or with `filename=True`
    a whole file name (an artifact's filename).
    """
    problem = _plain_name_problem(value, filename)
    if problem is not None:
        shown = repr(value) if not isinstance(value, str) or len(value) <= 60 else repr(value[:57] + "...")
        raise error(f"{what} must be a nonempty plain name; {shown} is refused: {problem}")
    return value


def read_json_object(path: Path, error: type[Exception] = UsageError) -> dict[str, Any]:
    """A JSON file that must hold an object (a settings file), else `error` naming the file and what it holds."""
    try:
        value = json.loads(Path(path).read_text())
    except (ValueError, RecursionError) as err:  # not JSON, not UTF-8, or nested too deep to parse
        raise error(f"{path} is not valid JSON ({str(err)[:200]})") from None
    if not isinstance(value, dict):
        raise error(f"{path} is a JSON {type(value).__name__}: expected an object of settings")
    return value
