"""Fetch chosen files of one hub repo revision into the Hugging Face cache, checked against what the hub announced.

The cache is huggingface_hub's own (`{kind}s--org--name/{blobs,refs,snapshots}`), so `hf download` and
`transformers` share it. A revision already in the cache with every file the caller needs is used without asking
the hub (a branch name means what it meant when it was fetched; `hf download` or a new `revision` moves it). Else
the hub names the revision's commit and files; each missing file is downloaded by `hf_hub_download` (a progress
bar; a process-unique temporary file renamed into place, under a lock, so two processes fetching at once both
succeed), then its size and its hash (SHA-256 of an LFS file, the git blob SHA-1 of another) are compared with
the hub's. A file that disagrees is deleted and the load refused. The ref (`refs/main` -> commit) is written
last, so a failed download leaves no revision that looks complete.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...errors import UsageError
from ...files import write_atomic
from .address import Address
from .failures import explain, named
from .settings import Settings, settings

__all__ = ["cached_snapshot", "fetch", "repo_folder"]

Complete = Callable[[Path], bool]


def repo_folder(address: Address, hub: Settings) -> Path:
    """The repo's folder in the cache: `<cache>/models--org--name` (or datasets--...)."""
    return hub.cache / f"{address.kind}s--{address.repo.replace('/', '--')}"


def cached_snapshot(address: Address, hub: Settings, complete: Complete) -> Path | None:
    """The cached snapshot of `address`'s revision (a ref or a commit) for which `complete(folder)` holds, or None."""
    repo = repo_folder(address, hub)
    revision = address.revision or "main"
    ref = repo / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision
    snapshot = repo / "snapshots" / commit
    folder = snapshot / address.subfolder if address.subfolder else snapshot
    return folder if snapshot.is_dir() and complete(folder) else None


def _hash(path: Path, lfs: bool) -> str:
    """SHA-256 of the file (an LFS file's id), or its git blob SHA-1 (another file's id)."""
    digest = hashlib.sha256() if lfs else hashlib.sha1(f"blob {path.stat().st_size}\0".encode())  # noqa: S324
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _check(address: Address, name: str, path: Path, sibling: Any) -> None:
    """Delete the downloaded file and refuse it when its size or hash is not what the hub announced."""
    lfs = sibling.lfs
    expected_size = lfs.size if lfs is not None else sibling.size
    expected_hash = lfs.sha256 if lfs is not None else sibling.blob_id
    size = path.stat().st_size
    problem = None
    if expected_size is not None and size != expected_size:
        problem = f"{size} bytes where the hub announced {expected_size}"
    elif expected_hash and _hash(path, lfs is not None) != expected_hash:
        problem = f"its {'SHA-256' if lfs is not None else 'git SHA-1'} is not the hub's {expected_hash[:12]}..."
    if problem is None:
        return
    blob = path.resolve()
    path.unlink(missing_ok=True)
    blob.unlink(missing_ok=True)
    raise UsageError(f"{named(address)} file {name!r}: the downloaded file has {problem}; it was deleted, not "
                     "loaded. Retry; if it persists the hub (or a proxy) serves a damaged file: report it to the "
                     "repo's owner, or pass a folder you checked")


def _files(address: Address, info: Any, patterns: Sequence[str]) -> dict[str, Any]:
    """{path in repo: sibling} of the revision's files directly in the subfolder whose name matches a pattern."""
    prefix = f"{address.subfolder}/" if address.subfolder else ""
    chosen = {}
    for sibling in info.siblings or ():
        name = sibling.rfilename
        inner = name[len(prefix):]
        if name.startswith(prefix) and "/" not in inner and any(fnmatch.fnmatch(inner, p) for p in patterns):
            chosen[name] = sibling
    return chosen


def fetch(address: Address, patterns: Sequence[str], complete: Complete,
          check: Callable[[list[str], list[str]], None] | None = None) -> Path:
    """The local folder of `address` (its snapshot, or the subfolder in it) holding the files matching `patterns`.

    `complete(folder)` says whether a cached folder has all it needs; `check(chosen, every)` (relative names) may
    refuse a repo before anything is downloaded (a .bin-only model)."""
    hub = settings()
    found = cached_snapshot(address, hub, complete)
    if found is not None:
        return found
    if hub.offline:
        raise UsageError(f"{named(address)}{' ' + address.subfolder if address.subfolder else ''} is not in the "
                         f"Hugging Face cache {hub.cache} and HF_HUB_OFFLINE is set: unset HF_HUB_OFFLINE to "
                         f"download it from {hub.endpoint}, or fetch it where there is network (`hf download "
                         f"{address.repo}{' --repo-type dataset' if address.kind == 'dataset' else ''}"
                         f"{' --revision ' + address.revision if address.revision else ''}`) and copy the cache")
    from huggingface_hub import HfApi, hf_hub_download  # lazy: only a download needs the hub client

    try:
        info = HfApi(endpoint=hub.endpoint, token=hub.token).repo_info(
            address.repo, repo_type=address.kind, revision=address.revision, files_metadata=True,
            timeout=hub.timeout)
    except Exception as err:  # huggingface_hub's HTTP errors and its client's network errors
        raise explain(address, err, hub) from None
    prefix = f"{address.subfolder}/" if address.subfolder else ""
    every = [s.rfilename[len(prefix):] for s in info.siblings or () if s.rfilename.startswith(prefix)]
    chosen = _files(address, info, patterns)
    if check is not None:
        check([name[len(prefix):] for name in chosen], every)
    snapshot = repo_folder(address, hub) / "snapshots" / info.sha
    for name, sibling in sorted(chosen.items()):
        if (snapshot / name).is_file():
            continue
        try:
            path = Path(hf_hub_download(address.repo, name, repo_type=address.kind, revision=info.sha,
                                        cache_dir=hub.cache, endpoint=hub.endpoint, token=hub.token,
                                        etag_timeout=hub.timeout))
        except Exception as err:  # as above: a cut connection, a stall, a 404, a size the hub itself refused
            raise explain(address, err, hub, name) from None
        _check(address, name, path, sibling)
    folder = snapshot / address.subfolder if address.subfolder else snapshot
    if not complete(folder):
        raise UsageError(f"{named(address)}{' ' + address.subfolder if address.subfolder else ''}: the revision "
                         f"{info.sha[:12]} lacks files lenscope needs; it holds: {', '.join(sorted(every)[:12])}")
    if address.revision != info.sha:
        write_atomic(repo_folder(address, hub) / "refs" / (address.revision or "main"), info.sha.encode(), sync=False)
    return folder
