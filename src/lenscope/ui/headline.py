"""Which curves a run page opens on: the keys its job declared (`logging/headline`), else the ranked default."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase

HEADLINE = "config/logging/headline"  # the job's declared keys, as the runs list flattens a node's config
DEFAULT_CURVES = 6


def headline_keys(config: Mapping[str, object], keys: Sequence[str]) -> list[str]:
    """The recorded `keys` a run page ticks first: those matching the job's `logging/headline` patterns in their
    order, else the first DEFAULT_CURVES of `keys` (already in `rank_keys` order: the job's own losses first)."""
    patterns = config.get(HEADLINE)
    if isinstance(patterns, str):
        patterns = [patterns]
    chosen: list[str] = []
    if isinstance(patterns, list):
        for pattern in patterns:
            if isinstance(pattern, str):
                chosen += [k for k in keys if fnmatchcase(k, pattern) and k not in chosen]
    return chosen or list(keys[:DEFAULT_CURVES])
