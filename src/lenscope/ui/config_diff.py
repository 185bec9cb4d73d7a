"""The config keys that tell runs apart: set by at least two of them, to different values.

A key only one run sets (another job's settings, when runs of different jobs are compared) says nothing
about how the runs differ: it is left out of the config columns and the compare view's diff, and listed apart.
"""

from __future__ import annotations

from collections.abc import Sequence

from lenscope.ui.headline import HEADLINE
from lenscope.ui.lineage_list import LineageRow

PRESENTATION = {HEADLINE}  # settings of how a run is shown, not of what it ran: never a default column


def differing(rows: Sequence[LineageRow]) -> list[str]:
    """The config keys at least two of `rows` set, to different values, sorted."""
    keys = sorted({k for row in rows for k in row.config})
    out = []
    for key in keys:
        values = [repr(row.config[key]) for row in rows if key in row.config]
        if len(values) > 1 and len(set(values)) > 1:
            out.append(key)
    return out


def unshared(rows: Sequence[LineageRow]) -> list[str]:
    """The config keys some of `rows` lack and that `differing` leaves out (set by one run, or alike where set)."""
    shown = set(differing(rows))
    return sorted({k for row in rows for k in row.config if k not in shown and any(k not in r.config for r in rows)})


def default_columns(rows: Sequence[LineageRow], most: int) -> list[str]:
    """The runs page's default config columns, at most `most`: the differing keys, first those that differ between
    runs of one job (what a sweep or a seed changed), then those that tell only jobs apart."""
    jobs: dict[str, list[LineageRow]] = {}
    for row in rows:
        jobs.setdefault(row.name, []).append(row)
    within = {key for group in jobs.values() if len(group) > 1 for key in differing(group)}
    keys = [k for k in differing(rows) if k not in PRESENTATION]
    return ([k for k in keys if k in within] + [k for k in keys if k not in within])[:most]
