"""One lineage's run page, besides its curves: the nodes that hold checkpoints or artifacts, the flip-books
(each figure artifact at every seq where it was made) and the lineages branched from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath

from sqlalchemy import exists, select

from lenscope.store import Node, StoreReader
from lenscope.store.schema import artifacts, edges, nodes
from lenscope.ui.lineage_list import in_lineage

FIGURE_SUFFIXES = frozenset({".pdf", ".png", ".jpg", ".jpeg", ".gif", ".webp", ".svg"})


def is_figure(filename: str) -> bool:
    """Whether an artifact file is a picture the browser can be shown (PDFs are rendered to PNG)."""
    return PurePosixPath(filename).suffix.lower() in FIGURE_SUFFIXES


@dataclass
class Stop:
    """A node of the lineage that holds a checkpoint or artifacts: one stop on the timeline."""

    node: Node
    status: str
    checkpoint: bool = False
    checkpoint_step: int | None = None
    artifacts: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Frame:
    """One page of a flip-book: the latest version of a figure artifact on one node."""

    node: Node
    version: int
    filename: str


@dataclass
class LineageDetail:
    """What the run page shows beside the curves."""

    stops: list[Stop]
    flipbooks: dict[str, list[Frame]]
    branches: list[tuple[Node, Node]]  # (the branch's first node, the node of this lineage it started from)

    @property
    def branch_groups(self) -> list[tuple[Node, list[Node]]]:
        """Each lineage started from this one, with every node of this one it started from (a crosscoder reads
        several checkpoints: one entry, not one per checkpoint), in order of first appearance."""
        groups: dict[Node, list[Node]] = {}
        for first, origin in self.branches:
            groups.setdefault(first, []).append(origin)
        return list(groups.items())


def lineage_detail(store: StoreReader, lineage: tuple[str, str]) -> LineageDetail:
    """Timeline stops, flip-books and branches of `lineage` = (name, nonce), in three statements."""
    newer = artifacts.alias("newer")
    latest = (
        select(nodes.c.seq, nodes.c.status, artifacts.c.name, artifacts.c.version, artifacts.c.filename)
        .join(nodes, nodes.c.id == artifacts.c.node_id)
        .where(in_lineage(nodes, lineage),
               ~exists().where(newer.c.node_id == artifacts.c.node_id, newer.c.name == artifacts.c.name,
                               newer.c.version > artifacts.c.version))
        .order_by(nodes.c.seq, artifacts.c.name)
    )
    checkpoints = (
        select(nodes.c.seq, nodes.c.status, nodes.c.checkpoint_step)
        .where(in_lineage(nodes, lineage), nodes.c.checkpoint.is_not(None))
    )
    child, parent = nodes.alias("child"), nodes.alias("parent")
    branched = (
        select(child.c.name, child.c.nonce, parent.c.seq)
        .select_from(edges.join(child, child.c.id == edges.c.child_id).join(parent, parent.c.id == edges.c.parent_id))
        .where(in_lineage(parent, lineage), child.c.seq == 0)
        .order_by(parent.c.seq, child.c.id)
    )
    with store.read() as connection:
        artifact_rows = connection.execute(latest).all()
        checkpoint_rows = connection.execute(checkpoints).all()
        branch_rows = connection.execute(branched).all()
    name, nonce = lineage
    statuses = {r.seq: r.status for r in [*artifact_rows, *checkpoint_rows]}
    stops = {seq: Stop(Node(name, nonce, seq), status) for seq, status in sorted(statuses.items())}
    for r in checkpoint_rows:
        stops[r.seq].checkpoint, stops[r.seq].checkpoint_step = True, r.checkpoint_step
    flipbooks: dict[str, list[Frame]] = {}
    for r in artifact_rows:
        stops[r.seq].artifacts.append(r.name)
        if is_figure(r.filename):
            flipbooks.setdefault(r.name, []).append(Frame(Node(name, nonce, r.seq), r.version, r.filename))
    branches = [(Node(r.name, r.nonce, 0), Node(name, nonce, r.seq)) for r in branch_rows]
    return LineageDetail(list(stops.values()), dict(sorted(flipbooks.items())), branches)



@dataclass(frozen=True)
class Book:
    """One figure's flip-book over the runs shown: one slider over every step any run has it at, one pane per run."""

    name: str
    steps: list[int]
    panes: list[tuple[str, list[Frame | None]]]  # (run, its frame at each step: the latest at or before, or None)


def side_by_side(labels: list[str], details: list[LineageDetail]) -> list[Book]:
    """The flip-books of several runs, figure by figure, aligned on step so one slider moves them all."""
    names = sorted({name for detail in details for name in detail.flipbooks})
    books = []
    for name in names:
        steps = sorted({f.node.seq for detail in details for f in detail.flipbooks.get(name, [])})
        panes = []
        for label, detail in zip(labels, details):
            frames, shown, at = detail.flipbooks.get(name, []), [], None
            index = 0
            for step in steps:
                while index < len(frames) and frames[index].node.seq <= step:
                    at, index = frames[index], index + 1
                shown.append(at)
            panes.append((label, shown))
        books.append(Book(name, steps, panes))
    return books
