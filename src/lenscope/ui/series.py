"""Metric curves of a lineage, thinned in SQL: per key and per bucket of seqs, the lowest and highest value.

A lineage of up to BUCKETS nodes gets one bucket per seq (every value exactly); a longer one gets
BUCKETS buckets, each drawn as its low and high value, so spikes survive however long the run.
Only the latest write of a key on a node counts (a resumed run's values replace the first ones);
buckets where earlier writes were replaced on a node without a checkpoint mark where the lineage was resumed (an
analysis with `--base` writes again only on the checkpointed node it restored: no step was recorded again).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import exists, func, select

from lenscope.store import StoreReader
from lenscope.store.schema import nodes, records
from lenscope.ui.lineage_list import in_lineage, rank_keys

BUCKETS = 800  # per curve: up to two points each, about two per horizontal pixel of a wide chart
FINITE = 1.7e308  # values beyond are infinities, which a chart cannot place


@dataclass
class Curves:
    """One lineage's curves: key -> (seqs, values) sorted by seq, the point count per key, and resume seqs."""

    lineage: tuple[str, str]
    points: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    resumes: list[int] = field(default_factory=list)

    @property
    def label(self) -> str:
        """`name@nonce`."""
        return f"{self.lineage[0]}@{self.lineage[1]}"


def lineage_keys(store: StoreReader, lineage: tuple[str, str]) -> list[str]:
    """Every value key recorded on the lineage's nodes, losses and accuracies first."""
    stmt = (select(records.c.key).distinct().join(nodes, nodes.c.id == records.c.node_id)
            .where(in_lineage(nodes, lineage)))
    with store.read() as connection:
        return rank_keys(connection.execute(stmt).scalars().all())


def text_keys(curves: Sequence[Curves], keys: Sequence[str]) -> list[str]:
    """The keys none of `curves` has a number for (text, None, NaN): the run page shows them as text."""
    return [key for key in keys if not any(c.counts.get(key) for c in curves)]


def load_curves(store: StoreReader, lineage: tuple[str, str], keys: Sequence[str], buckets: int = BUCKETS) -> Curves:
    """The numeric values of `keys` on `lineage`, at most two points per bucket of seqs.

    Strings, None, NaN and infinities are left out (a curve has no place for them). A key written twice
    on a node (a resumed run recorded those steps again) counts with its latest write only. One grouped
    statement reads every value; it also shows where writes came out of step order (a bucket holding more
    writes than steps, or older writes than the bucket before it), and only then does a second statement
    read the values again keeping the latest write per node, a probe per value.
    """
    curves = Curves(lineage, {key: ([], []) for key in keys}, dict.fromkeys(keys, 0))
    if not keys:
        return curves
    with store.read() as connection:
        last = connection.execute(select(func.max(nodes.c.seq)).where(in_lineage(nodes, lineage))).scalar() or 0
        width = max(1, math.ceil((last + 1) / buckets))
        stmt = _grouped(lineage, keys, width)
        rows = connection.execute(stmt).all()
        rewritten = _rewritten(rows)
        again: set[tuple[str, int]] = set()
        if rewritten:
            later = records.alias("later")
            rows = connection.execute(stmt.where(~exists().where(
                later.c.node_id == records.c.node_id, later.c.key == records.c.key, later.c.id > records.c.id))).all()
            again = _stepped_again(connection, lineage, keys, width)
    before: dict[str, bool] = {}
    for row in rows:
        xs, ys = curves.points[row.key]
        curves.counts[row.key] += row.count
        replaced = (row.key, row.bucket) in again
        if replaced and not before.get(row.key):
            curves.resumes.append(row.first)
        before[row.key] = replaced
        if width == 1 or row.low == row.high:
            xs.append(row.first if width == 1 else (row.first + row.last) // 2)
            ys.append(row.low)
            continue
        middle = (row.first + row.last) / 2
        rising = not ys or abs(ys[-1] - row.low) <= abs(ys[-1] - row.high)  # follow the curve: nearer end first
        xs += [middle, middle]
        ys += [row.low, row.high] if rising else [row.high, row.low]
    curves.resumes = sorted(set(curves.resumes))
    return curves


def _grouped(lineage: tuple[str, str], keys: Sequence[str], width: int):
    """Per key and bucket of `width` seqs: lowest and highest value, first and last seq, count, id range."""
    bucket = nodes.c.seq // width if width > 1 else nodes.c.seq
    return (
        select(records.c.key, bucket.label("bucket"), func.min(records.c.num).label("low"),
               func.max(records.c.num).label("high"), func.min(nodes.c.seq).label("first"),
               func.max(nodes.c.seq).label("last"), func.count().label("count"),
               func.min(records.c.id).label("oldest"), func.max(records.c.id).label("newest"))
        .join(nodes, nodes.c.id == records.c.node_id)
        .where(in_lineage(nodes, lineage), records.c.key.in_(list(keys)), records.c.kind.in_(("i", "f", "b")),
               records.c.num > -FINITE, records.c.num < FINITE)
        .group_by(records.c.key, bucket)
        .order_by(records.c.key, bucket)
    )


def _stepped_again(connection, lineage: tuple[str, str], keys: Sequence[str], width: int) -> set[tuple[str, int]]:
    """(key, bucket) pairs holding a node without a checkpoint that has the key written more than once: steps a
    resumed training run recorded again."""
    stmt = (select(records.c.key, nodes.c.seq).join(nodes, nodes.c.id == records.c.node_id)
            .where(in_lineage(nodes, lineage), records.c.key.in_(list(keys)), nodes.c.checkpoint.is_(None))
            .group_by(records.c.key, nodes.c.seq).having(func.count() > 1))
    return {(r.key, r.seq // width if width > 1 else r.seq) for r in connection.execute(stmt)}


def _rewritten(rows: list) -> set[tuple[str, int]]:
    """(key, bucket) pairs whose steps were written again: more writes than steps, or writes older than the
    newest write of the bucket before (in one run, later steps are always written later)."""
    out: set[tuple[str, int]] = set()
    newest: dict[str, int] = {}
    for row in rows:
        if row.count > row.last - row.first + 1 or row.oldest < newest.get(row.key, -1):
            out.add((row.key, row.bucket))
        newest[row.key] = max(newest.get(row.key, -1), row.newest)
    return out
