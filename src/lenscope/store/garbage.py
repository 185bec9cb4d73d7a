"""Files nothing in the store refers to: unreferenced blobs, leftovers of killed writes, unmarked checkpoints.

Unreferenced blobs are found and removed under the database write lock, and every artifact write
re-checks its blobs under that same lock (`put_artifacts`), so a blob written by a concurrent
writer is either seen as referenced here or written again there: never lost.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection, select, text

from lenscope.store.schema import artifacts, nodes
from lenscope.store.store import Store

MIN_AGE_S = 3600.0
"""Leftovers younger than this may belong to a write still in progress (an Orbax save, a blob being
written), so they are left alone unless the caller asks for a smaller age."""

_BLOB = re.compile(r"[0-9a-f]{64}")
ORBAX_TMP = ".orbax-checkpoint-tmp"  # Orbax writes <name>.orbax-checkpoint-tmp-<time> and renames it when done


@dataclass(frozen=True)
class Garbage:
    """One file or folder nothing refers to: what it is, where, and how many bytes it takes."""

    kind: str  # "unreferenced blob", "temporary file", "temporary checkpoint folder", "unmarked checkpoint folder"
    path: Path
    size: int

    def __str__(self) -> str:
        return f"{self.kind}: {self.path} ({self.size} bytes)"


def find_leftovers(store: Store, min_age: float = MIN_AGE_S) -> list[Garbage]:
    """Temporary files of killed blob writes, Orbax temporary folders and unmarked checkpoint folders.

    Only those whose newest file is older than `min_age` seconds.
    """
    cutoff = time.time() - min_age
    found = [("temporary file", path) for path in _blob_files(store.blobs.root) if _is_temp(path)]
    marked = _marked_checkpoints(store)
    for folder in _checkpoint_folders(store.root / "checkpoints"):
        if ORBAX_TMP in folder.name:
            found.append(("temporary checkpoint folder", folder))
        elif folder.resolve() not in marked:
            found.append(("unmarked checkpoint folder", folder))
    out = []
    for kind, path in found:
        try:
            if _newest(path) < cutoff:
                out.append(Garbage(kind, path, _tree_size(path)))
        except FileNotFoundError:  # removed meanwhile (a write finished, another gc ran)
            continue
    return out


def find_unreferenced_blobs(store: Store) -> list[Garbage]:
    """Blob files that no artifact row names (a snapshot: removal re-checks under the write lock)."""
    on_disk = _blob_paths(store)
    with store.read() as connection:
        referenced = _referenced(connection)
    return [Garbage("unreferenced blob", path, _tree_size(path))
            for digest, path in on_disk.items() if digest not in referenced and path.exists()]


def remove_unreferenced_blobs(store: Store) -> list[Garbage]:
    """Delete blob files no artifact row names, holding the database write lock; returns what went."""
    on_disk = _blob_paths(store)
    removed = []
    with store._write("gc") as connection:
        if connection.dialect.name == "postgresql":
            # Conflicts with the ROW EXCLUSIVE lock an artifact INSERT takes: writers wait for us, we for them.
            connection.execute(text(f"LOCK TABLE {artifacts.name} IN SHARE ROW EXCLUSIVE MODE"))
        referenced = _referenced(connection)
        for digest, path in on_disk.items():
            if digest not in referenced:
                try:
                    size = path.stat().st_size
                    path.unlink()
                except FileNotFoundError:  # another gc took it
                    continue
                removed.append(Garbage("unreferenced blob", path, size))
    return removed


def remove(items: list[Garbage]) -> None:
    """Delete leftover files and folders (and checkpoint parent folders left empty)."""
    for item in items:
        if item.path.is_dir():
            shutil.rmtree(item.path, ignore_errors=True)
            for parent in (item.path.parent, item.path.parent.parent):
                try:
                    parent.rmdir()  # only when empty
                except OSError:
                    break
        else:
            item.path.unlink(missing_ok=True)


def collect(store: Store, *, dry_run: bool = False, min_age: float = MIN_AGE_S) -> list[Garbage]:
    """What `lenscope gc` does: find (and unless `dry_run`, delete) unreferenced blobs and leftovers."""
    leftovers = find_leftovers(store, min_age)
    if dry_run:
        return find_unreferenced_blobs(store) + leftovers
    remove(leftovers)
    return remove_unreferenced_blobs(store) + leftovers


def _referenced(connection: Connection) -> set[str]:
    return set(connection.execute(select(artifacts.c.sha256).distinct()).scalars())


def _blob_files(root: Path) -> Iterator[Path]:
    """Every file in the blob folder's two-hex-digit subfolders."""
    if not root.is_dir():
        return
    for folder in sorted(root.iterdir()):
        if folder.is_dir():
            yield from sorted(p for p in folder.iterdir() if p.is_file())


def _blob_paths(store: Store) -> dict[str, Path]:
    """Blob files named by their digest, in the folder their digest puts them in."""
    return {p.name: p for p in _blob_files(store.blobs.root)
            if _BLOB.fullmatch(p.name) and p.parent.name == p.name[:2]}


def _is_temp(path: Path) -> bool:
    """A temporary sibling `files.atomic_path` makes: `.<name>.<random>.tmp`."""
    return path.name.startswith(".") and path.name.endswith(".tmp")


def _checkpoint_folders(root: Path) -> Iterator[Path]:
    """Folders at <root>/<name>/<nonce>/<seq or Orbax temporary>."""
    if not root.is_dir():
        return
    for name in sorted(p for p in root.iterdir() if p.is_dir()):
        for nonce in sorted(p for p in name.iterdir() if p.is_dir()):
            yield from sorted(p for p in nonce.iterdir() if p.is_dir())


def _marked_checkpoints(store: Store) -> set[Path]:
    with store.read() as connection:
        stored = connection.execute(select(nodes.c.checkpoint).where(nodes.c.checkpoint.is_not(None))).scalars()
        return {store.checkpoint_path(value).resolve() for value in stored}


def _tree_size(path: Path) -> int:
    """Bytes in a file, or in every file under a folder."""
    if not path.is_dir():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _newest(path: Path) -> float:
    """The latest modification time in `path` (itself and, for a folder, everything in it)."""
    times = [path.stat().st_mtime]
    if path.is_dir():
        for dirpath, _, files in os.walk(path):
            times.append(os.stat(dirpath).st_mtime)
            times += [os.stat(os.path.join(dirpath, f)).st_mtime for f in files]
    return max(times)
