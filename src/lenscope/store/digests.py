"""Content digests of the files in a folder (a checkpoint), and how a folder differs from its recorded digests."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20  # bytes hashed per read: large files are never held in memory whole


@dataclass(frozen=True)
class FileDigest:
    """One file of a folder: its path relative to the folder (POSIX), size and SHA-256."""

    path: str
    size: int
    sha256: str


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of the file at `path`, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def folder_files(folder: Path) -> list[str]:
    """Relative POSIX paths of the regular files under `folder`, sorted (empty if it does not exist)."""
    if not folder.is_dir():
        return []
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file())


def digest_folder(folder: Path) -> list[FileDigest]:
    """The digest of every regular file under `folder` (none if it does not exist)."""
    out = []
    for relative in folder_files(folder):
        path = folder / relative
        out.append(FileDigest(relative, path.stat().st_size, file_sha256(path)))
    return out


def differences(folder: Path, recorded: Iterable[FileDigest]) -> list[str]:
    """How `folder` differs from `recorded`, one phrase per damaged file (missing, resized, changed); [] if intact.

    Files the record does not name are not damage (nothing reads them) and are left to `extra_files`.
    """
    problems = []
    for entry in recorded:
        path = folder / entry.path
        if not path.is_file():
            problems.append(f"{entry.path} is missing")
        elif (size := path.stat().st_size) != entry.size:
            problems.append(f"{entry.path} has {size} bytes, {entry.size} were written")
        elif file_sha256(path) != entry.sha256:
            problems.append(f"{entry.path} does not match the SHA-256 recorded when it was written")
    return problems


def extra_files(folder: Path, recorded: Iterable[FileDigest]) -> list[str]:
    """Files under `folder` that `recorded` does not name."""
    named = {entry.path for entry in recorded}
    return [path for path in folder_files(folder) if path not in named]
