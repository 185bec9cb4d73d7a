"""Error types whose class decides the CLI exit code (2 = the user's input or code, 1 = lenscope's own failure)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class LenscopeError(Exception):
    """Base of every error lenscope raises on purpose; its message is one readable line."""

    exit_code = 1


class UsageError(LenscopeError):
    """Bad input from the user: unknown name, malformed argument, wrong type."""

    exit_code = 2


class ConfigError(UsageError):
    """A configuration that does not fit its schema; raised before anything runs."""


class CheckpointError(UsageError):
    """A checkpoint that does not fit the model being restored, or is missing or damaged (the user's input)."""


class StoreError(LenscopeError):
    """The lineage store refused a read or a write, or is of another schema version."""


class StoreInputError(StoreError):
    """A store that cannot serve as given: damaged, not a lenscope store, or read-only for a write (exit 2)."""

    exit_code = 2


class JobError(LenscopeError):
    """A job failed while running."""


def nearest(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The closest valid choices to `word`, for 'did you mean' hints."""
    choices = list(choices)
    close = difflib.get_close_matches(word, choices, n=n, cutoff=0.5)
    if not close:
        close = [c for c in choices if word.split("/")[-1] in c][:n]
    return close


def hint(word: str, choices: Iterable[str]) -> str:
    """A ' (did you mean a, b?)' suffix, or '' when nothing is close."""
    close = nearest(word, choices)
    return f" (did you mean {', '.join(close)}?)" if close else ""
