"""A crosscoder's timeline page (`/crosscoder/ADDRESS/NAME`): its latents as rows and the checkpoints it read as
columns, each cell coloured by the latent's decoder-norm share (or norm) there, rows by birth step; above, on the
same step axis, the loss and accuracy curves of the model lineage it read. Drawn as SVG on the server."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import Response

from lenscope.store import Node
from lenscope.ui.crosscoder_data import (
    DASHBOARDS,
    MAX_ROWS,
    MAX_TABLE_BYTES,
    Latent,
    Latents,
    checkpoints_read,
    dashboard_latents,
    read_latents,
    shown,
)
from lenscope.ui.nodes import Missing, artifact_file, artifact_info, parse_node
from lenscope.ui.params import number
from lenscope.ui.series import Curves, lineage_keys, load_curves
from lenscope.ui.svg import Chart, Line, chart
from lenscope.ui.tables import PAGE_ROWS, TableError

WIDTH = 960  # the curves and the grid share this width and these margins, so a step is one x in both
LEFT, RIGHT = 64, 96  # row labels | density bars
CURVE_HEIGHT = 190
HEAD = 22  # the step labels above the grid
LEVELS = 10  # colour steps of a cell: level k holds values v with sqrt(v) in ((k-1)/LEVELS, k/LEVELS]
LEGEND_WIDTH = 320
MAX_LABELS = 16  # step labels over the grid (more checkpoints: every k-th)
CURVE_KEYS = 4  # lines per chart
_LOSS = re.compile(r"[^/]+/[^/]*loss[^/]*")  # top-level scalars of a run: train/loss, val/loss
_ACCURACY = re.compile(r"[^/]+/[^/]*acc[^/]*")


@dataclass(frozen=True)
class Column:
    """One checkpoint's column: its step, the x of that step, and the cell's left edge and width (pixels)."""

    step: int
    x: float
    left: float
    width: float
    label: bool
    node: Node | None  # the checkpoint node read, when known


@dataclass(frozen=True)
class Row:
    """One latent's row: where it is drawn, its cells (x, width, level, born), its links and hover text."""

    latent: Latent
    y: float
    cells: list[tuple[float, float, int, bool, str | None]]  # x, width, level, born, its dashboard at that step
    birth_step: int
    href: str  # the latent's row in the table page, or its dashboard when it has one
    title: str
    bar: float  # width of its density bar


@dataclass
class Grid:
    """The drawn grid: its size, columns, rows, the birth staircase, the lines between birth groups."""

    height: float
    row_height: float
    cell_height: float
    columns: list[Column]
    rows: list[Row]
    births: str  # SVG path: the left edge of each row's birth cell
    groups: list[tuple[float, str]]  # (y, label) where a new birth step (or the dead latents) begins
    labels: bool  # rows tall enough for their latent id


def row_height(rows: int) -> float:
    """Pixels per latent row: 14 for a few rows, down to 3 for MAX_ROWS."""
    return float(max(3, min(14, 1600 // max(rows, 1))))


def span(steps: list[int], curves: list[Curves]) -> tuple[float, float, list[tuple[float, float]]]:
    """(x0, x1, each column's (left, right) in steps): a column reaches halfway to its neighbours (as far past the
    first and last step as to the next one); the x range covers the columns and every curve's steps."""
    gaps = [b - a for a, b in zip(steps, steps[1:])] or [max(1.0, abs(steps[0]) * 0.1)]
    edges = [steps[0] - gaps[0] / 2] + [(a + b) / 2 for a, b in zip(steps, steps[1:])] + [steps[-1] + gaps[-1] / 2]
    xs = [x for c in curves for xs, _ in c.points.values() for x in xs]
    return min([edges[0], *xs]), max([edges[-1], *xs]), list(zip(edges, edges[1:]))


def level(value: float | None) -> int:
    """The colour level (0..LEVELS) of a value in [0, 1], on a square-root scale."""
    if value is None or value <= 0:
        return 0
    return min(LEVELS, max(1, math.ceil(math.sqrt(min(value, 1.0)) * LEVELS - 1e-9)))


def _px(step: float, x0: float, x1: float) -> float:
    return LEFT + (step - x0) / (x1 - x0) * (WIDTH - LEFT - RIGHT)


def grid(data: Latents, latents: list[Latent], frame: tuple[float, float, list[tuple[float, float]]],
         view: str, table_link: str, read: dict[int, Node], feature_link: str = "",
         dashboards: frozenset[int] = frozenset()) -> Grid:
    """Lay out the rows of `latents` (already ordered) over `data.steps` on the x frame the curves use; a latent in
    `dashboards` links each cell to its dashboard at that step (`feature_link` + latent), the others their row to
    the table page."""
    x0, x1, spans = frame
    every = math.ceil(len(data.steps) / MAX_LABELS)
    columns = []
    for i, (step, (a, b)) in enumerate(zip(data.steps, spans)):
        left, right = _px(a, x0, x1), _px(b, x0, x1)
        gap = 1.0 if right - left > 6 else 0.0
        columns.append(Column(step, round(_px(step, x0, x1), 2), round(left + gap / 2, 2), round(right - left - gap, 2),
                              i % every == 0 or i == len(data.steps) - 1, read.get(step)))
    h = row_height(len(latents))
    top_norm = max((n for t in data.latents for n in t.norms if n is not None), default=0.0) or 1.0
    top_density = max((t.density or 0.0 for t in latents), default=0.0) or 1.0
    rows, births, groups, previous = [], [], [], None
    for index, t in enumerate(latents):
        y = HEAD + index * h
        values = t.shares if view == "share" else [None if n is None else n / top_norm for n in t.norms]
        page = f"{feature_link}{t.latent}" if t.latent in dashboards else None
        cells = [(c.left, c.width, level(v), i == t.birth, page and f"{page}?step={c.step}#step-{c.step}")
                 for i, (c, v) in enumerate(zip(columns, values))]
        shares = " / ".join(f"{s:.3g}" for s in t.shares)
        density = "-" if t.density is None else f"{t.density:.4g}"
        title = (f"latent {t.latent}{'' if t.live else ' (dead)'} · born at step {data.steps[t.birth]} · density "
                 f"{density} · share {shares} at steps {' / '.join(map(str, data.steps))}")
        href = page or f"{table_link}&page={t.row // PAGE_ROWS}#row-{t.row}"
        bar = round((RIGHT - 24) * (t.density or 0.0) / top_density, 2)
        rows.append(Row(t, y, cells, data.steps[t.birth], href, title, bar))
        group = (t.live, t.birth)
        edge = columns[t.birth].left
        if group != previous:
            if previous is not None:
                groups.append((y, "dead" if previous[0] and not t.live else ""))
            births.append(f"M{edge:.1f},{y:.1f}" if previous is None or previous[0] != t.live
                          else f"H{edge:.1f}")
        births.append(f"V{y + h:.1f}")
        previous = group
    cell_height = h - 1 if h >= 6 else h
    return Grid(HEAD + len(latents) * h, h, cell_height, columns, rows, "".join(births), groups, h >= 10)


def curve_charts(curves: Curves, keys: list[str], frame: tuple[float, float, list]) -> list[Chart]:
    """The loss chart (log scale) and the accuracy chart of the model lineage, on the grid's x frame."""
    out = []
    for title, pattern, log in (("loss", _LOSS, True), ("accuracy", _ACCURACY, False)):
        chosen = [k for k in keys if pattern.fullmatch(k)][:CURVE_KEYS]
        if chosen:
            lines = [Line(k, *curves.points[k], slot=i) for i, k in enumerate(chosen)]
            out.append(chart(title, lines, log, xspan=(frame[0], frame[1]), width=WIDTH, height=CURVE_HEIGHT,
                             left=LEFT, right=RIGHT))
    return out


def legend(threshold: float, even: float) -> list[tuple[float, str]]:
    """(x in the legend bar, label) of its ticks: 0, the birth threshold, an even share, 0.5 and 1."""
    ticks = {0.0: "0", threshold: f"{threshold:.3g}", even: f"{even:.3g}", 0.5: "0.5", 1.0: "1"}
    return [(round(math.sqrt(v) * LEGEND_WIDTH, 1), label) for v, label in sorted(ticks.items())]


def crosscoder(request: Request) -> Response:
    """A crosscoder table's latents over the checkpoints it read, with the model's loss and accuracy above."""
    ui, params = request.app.state.ui, request.query_params
    node = parse_node(request.path_params["address"])
    name = request.path_params["name"]
    info = artifact_info(ui.store, node, name, number(params.get("version"), "version"))
    if info.size > MAX_TABLE_BYTES:
        raise Missing(f"{name} on {node.address} is too large to draw here ({info.size} bytes; at most "
                      f"{MAX_TABLE_BYTES}): download it")
    try:
        data = read_latents(artifact_file(ui.store, info))
    except TableError as error:
        raise Missing(f"{name} on {node.address}: {error}") from None
    view = "norm" if params.get("view") == "norm" else "share"
    read = checkpoints_read(ui.store, node)
    model = read[0].lineage if read else None
    keys = [k for k in lineage_keys(ui.store, model) if _LOSS.fullmatch(k) or _ACCURACY.fullmatch(k)] if model else []
    curves = load_curves(ui.store, model, keys) if model else Curves(("", ""))
    frame = span(data.steps, [curves])
    picked = shown(data.latents)
    base = f"/crosscoder/{quote(node.address, safe='')}/{quote(name, safe='')}"
    table_link = f"/view/{quote(node.address, safe='')}/{quote(name, safe='')}?{urlencode({'version': info.version})}"
    dashboards = frozenset(dashboard_latents(ui.store, node))
    feature_link = f"/feature/{quote(node.address, safe='')}/{DASHBOARDS}/"
    return ui.page(
        "crosscoder.html", title=f"crosscoder {node.address}", node=node, info=info, data=data, picked=picked,
        grid=grid(data, picked.rows, frame, view, table_link, {n.seq: n for n in read}, feature_link, dashboards),
        dashboards=len(dashboards),
        charts=curve_charts(curves, keys, frame), model=model, view=view, width=WIDTH, left=LEFT, right=RIGHT,
        head=HEAD, max_rows=MAX_ROWS, table_link=table_link, legend=legend(data.threshold, 1 / len(data.steps)),
        legend_width=LEGEND_WIDTH, levels=LEVELS,
        views={v: f"{base}?{urlencode({'version': info.version, 'view': v})}" for v in ("share", "norm")})
