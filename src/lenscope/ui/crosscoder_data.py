"""A crosscoder's latents over the checkpoints it read, from its `crosscoder.parquet` (one row per latent: `latent`,
`density`, per checkpoint `share_step_S` and `norm_step_S`): each latent's birth step and the order the timeline page
draws them in; the model lineage it read, and the crosscoders that read a lineage.

A latent is **born** at the first checkpoint whose share is at least BIRTH_FRACTION of an even share (1 / N for N
checkpoints). Half of an even share is the crosscoder's own line for "shared" (`crosscoder/shared_latents`), and it
gives every latent a birth: its shares sum to 1, so one of them is at least 1 / N.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import and_, func, or_, select

from lenscope.store import Node, StoreReader
from lenscope.store.schema import artifacts, edges, nodes
from lenscope.ui.lineage_list import in_lineage
from lenscope.ui.nodes import Missing, artifact_file, artifact_info
from lenscope.ui.tables import TableError, columns

TABLE = "crosscoder.parquet"  # the artifact a crosscoder records on its last node
DASHBOARDS = "features.parquet"  # its feature dashboards, beside it (`sae/dashboards` latents)
BIRTH_FRACTION = 0.5  # born at the first checkpoint with a share of at least this fraction of 1 / checkpoints
MAX_ROWS = 512  # latents the page draws (the most often firing live ones; the table page has them all)
MAX_TABLE_BYTES = 64 << 20  # a table the page reads whole; a larger one is refused unread
MAX_BRANCHES = 16  # branches of crosscoders followed back to the checkpoints the first one read
_SHARE = re.compile(r"share_step_(\d+)")


@dataclass(frozen=True)
class Latent:
    """One latent: its id, its row in the table, its firing density and its share and norm at each checkpoint."""

    latent: int
    row: int
    density: float | None
    shares: tuple[float, ...]
    norms: tuple[float | None, ...]
    birth: int  # index of the checkpoint it is born at

    @property
    def live(self) -> bool:
        """Whether it fired on some validation token."""
        return self.density is not None and self.density > 0


@dataclass
class Latents:
    """A crosscoder table read: its checkpoint steps and every latent, in the table's order."""

    steps: list[int]
    latents: list[Latent]

    @property
    def threshold(self) -> float:
        """The share a latent reaches at its birth: BIRTH_FRACTION / checkpoints."""
        return BIRTH_FRACTION / len(self.steps)


@dataclass
class Shown:
    """The latents the page draws, in order (live by birth, then dead), and what it leaves out."""

    rows: list[Latent]
    live: int
    dead: int
    live_cut: int  # live latents not drawn (past MAX_ROWS, the least often firing)
    dead_cut: int  # dead latents not drawn


def _number(value: Any) -> float | None:
    """A finite float, or None for None, NaN, infinities and anything that is no number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def birth(shares: tuple[float, ...], threshold: float) -> int:
    """The index of the first checkpoint whose share is at least `threshold` (the last one if none is)."""
    return next((i for i, share in enumerate(shares) if share >= threshold), len(shares) - 1)


def read_latents(content: bytes | Path) -> Latents:
    """The latents of a crosscoder table; a TableError for a table without `latent` and `share_step_S` columns."""
    table = columns(content, "the crosscoder table")
    steps = sorted(int(found.group(1)) for name in table if (found := _SHARE.fullmatch(name)))
    if "latent" not in table or not steps:
        raise TableError("not a crosscoder table: it needs a `latent` column and `share_step_S` columns")
    count = len(table["latent"])
    empty: list[Any] = [None] * count
    share_columns = [table[f"share_step_{s}"] for s in steps]
    norm_columns = [table.get(f"norm_step_{s}", empty) for s in steps]
    threshold = BIRTH_FRACTION / len(steps)
    latents = []
    for row, latent in enumerate(table["latent"]):
        if isinstance(latent, bool) or not isinstance(latent, int):
            raise TableError(f"not a crosscoder table: latent {latent!r} in row {row} is not an integer")
        shares = tuple(_number(column[row]) or 0.0 for column in share_columns)
        latents.append(Latent(latent, row, _number(table.get("density", empty)[row]), shares,
                              tuple(_number(column[row]) for column in norm_columns), birth(shares, threshold)))
    return Latents(steps, latents)


def order(latents: list[Latent]) -> list[Latent]:
    """By birth; among latents born together, the largest share at birth first, then by id."""
    return sorted(latents, key=lambda t: (t.birth, -t.shares[t.birth], t.latent))


def shown(latents: list[Latent], max_rows: int = MAX_ROWS) -> Shown:
    """The rows the page draws: the live latents (the `max_rows` most often firing, if more) by birth, then as many
    dead ones as fit, by birth too."""
    live = [t for t in latents if t.live]
    dead = [t for t in latents if not t.live]
    kept = sorted(live, key=lambda t: (-(t.density or 0.0), t.latent))[:max_rows]
    room = max(0, max_rows - len(kept))
    rows = order(kept) + order(dead)[:room]
    return Shown(rows, len(live), len(dead), len(live) - len(kept), max(0, len(dead) - room))


def dashboard_latents(store: StoreReader, node: Node) -> set[int]:
    """The latents with a feature dashboard on `node` (none without a readable DASHBOARDS table)."""
    try:
        info = artifact_info(store, node, DASHBOARDS)
        if info.size > MAX_TABLE_BYTES:
            return set()
        found = columns(artifact_file(store, info), DASHBOARDS, ["latent"]).get("latent") or []
    except (Missing, TableError):
        return set()
    return {t for t in found if isinstance(t, int) and not isinstance(t, bool)}


def checkpoints_read(store: StoreReader, node: Node) -> list[Node]:
    """The checkpoint nodes a crosscoder's lineage read: its first node's parents, in order (through branches of
    crosscoders: a first node whose one parent is a node of the same name)."""
    first = nodes.alias("first")
    for _ in range(MAX_BRANCHES):
        stmt = (select(nodes.c.name, nodes.c.nonce, nodes.c.seq)
                .join(edges, edges.c.parent_id == nodes.c.id).join(first, first.c.id == edges.c.child_id)
                .where(first.c.name == node.name, first.c.nonce == node.nonce, first.c.seq == 0)
                .order_by(edges.c.position))
        with store.read() as connection:
            parents = [Node(r.name, r.nonce, r.seq) for r in connection.execute(stmt)]
        if len(parents) == 1 and parents[0].name == node.name:
            node = parents[0]
            continue
        return parents
    return []


def crosscoders_of(store: StoreReader, lineage: tuple[str, str]) -> list[Node]:
    """The last node holding a crosscoder table of each lineage that read checkpoints of `lineage` (its first node is
    a child of one of them), and of `lineage` itself when it is a crosscoder's; in one statement."""
    child, parent = nodes.alias("child"), nodes.alias("parent")
    readers = (select(child.c.name, child.c.nonce).distinct()
               .select_from(edges.join(child, child.c.id == edges.c.child_id)
                            .join(parent, parent.c.id == edges.c.parent_id))
               .where(in_lineage(parent, lineage), child.c.seq == 0)
               .subquery())
    reads = and_(readers.c.name == nodes.c.name, readers.c.nonce == nodes.c.nonce)
    stmt = (select(nodes.c.name, nodes.c.nonce, func.max(nodes.c.seq).label("seq"))
            .join(artifacts, artifacts.c.node_id == nodes.c.id)
            .where(artifacts.c.name == TABLE,
                   or_(in_lineage(nodes, lineage), select(readers.c.name).where(reads).exists()))
            .group_by(nodes.c.name, nodes.c.nonce)
            .order_by(nodes.c.name, nodes.c.nonce))
    with store.read() as connection:
        return [Node(r.name, r.nonce, r.seq) for r in connection.execute(stmt)]
