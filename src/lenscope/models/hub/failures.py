"""A hub failure as one UsageError naming the repo, the revision, what went wrong and what to do."""

from __future__ import annotations

from ...errors import UsageError
from .address import Address
from .settings import Settings

__all__ = ["explain", "named"]


def named(address: Address) -> str:
    """`kind org/name@revision` as messages name it."""
    return f"{address.kind} {address.repo}@{address.revision or 'main'}"


def _kinds(err: BaseException) -> set[str]:
    """The class names of `err` and of the errors it was raised from (a timeout under a lookup error)."""
    names: set[str] = set()
    seen = 0
    while err is not None and seen < 8:
        names |= {cls.__name__ for cls in type(err).__mro__}
        err, seen = err.__cause__ or err.__context__, seen + 1
    return names


def explain(address: Address, err: BaseException, hub: Settings, file: str | None = None) -> UsageError:
    """The UsageError for `err`, raised by huggingface_hub (or its HTTP client) while fetching `address`."""
    what = named(address) + (f" file {file!r}" if file else "")
    kinds = _kinds(err)
    if "GatedRepoError" in kinds:
        return UsageError(f"{what}: the repo is gated on {hub.endpoint} (HTTP 401/403): accept its terms on its page, "
                          "then set HF_TOKEN to a token of that account (or run `hf auth login`)")
    if "RevisionNotFoundError" in kinds:
        return UsageError(f"{what}: {hub.endpoint} has no revision {address.revision!r} of {address.repo}; "
                          "give a branch, tag or commit it has (revision=..., or NAME@REVISION)")
    if "RemoteEntryNotFoundError" in kinds:
        return UsageError(f"{what}: the file is missing on {hub.endpoint}; check the repo's file list")
    if "RepositoryNotFoundError" in kinds:
        return UsageError(f"{what}: {hub.endpoint} has no repo {address.repo!r} (or it is private: set HF_TOKEN to a "
                          "token that may read it); check the name, or pass a local folder")
    if any("Timeout" in k for k in kinds):
        return UsageError(f"{what}: {hub.endpoint} did not answer in time ({type(err).__name__}); retry, raise "
                          "HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT, or set HF_HUB_OFFLINE=1 to use a copy "
                          f"already in the cache {hub.cache}")
    reason = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
    return UsageError(f"{what}: the download from {hub.endpoint} failed ({type(err).__name__}: {reason}); nothing "
                      "half-written is kept: retry (an interrupted download starts again), check the network and "
                      "HF_ENDPOINT, or set HF_HUB_OFFLINE=1 to use a copy already in the cache")
