"""The HTML pages: runs (`/`), one run (`/run/NAME@NONCE`), one node, one artifact version, an attribution
graph (`/graph/NODE/NAME`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from lenscope.store import Node
from lenscope.store.leases import stale
from lenscope.ui import content
from lenscope.ui.config_diff import default_columns, differing, unshared
from lenscope.ui.crosscoder_data import crosscoders_of
from lenscope.ui.graph_marks import side_by_side_marks
from lenscope.ui.graph_page import is_graph, load_address, load_graph
from lenscope.ui.headline import headline_keys
from lenscope.ui.lineage_list import LineageRow, lineage_ids, lineage_rows, parse_lineage, value_keys, with_liveness
from lenscope.ui.lineage_page import lineage_detail, side_by_side
from lenscope.ui.live import stamp
from lenscope.ui.nodes import (
    ArtifactInfo,
    Missing,
    artifact_file,
    artifact_head,
    artifact_info,
    node_detail,
    parse_node,
)
from lenscope.ui.params import number
from lenscope.ui.series import Curves, lineage_keys, load_curves, text_keys
from lenscope.ui.svg import Line, chart
from lenscope.ui.sweep_tags import sweep_tags
from lenscope.ui.tables import TableError, fold_reason, outline, preview

DEFAULT_CONFIG_COLUMNS = 4
MIN_CONFIG_COLUMNS = 2
MAX_COLUMNS = 6  # config and metric columns the runs list shows by default (more scroll sideways)
MAX_COMPARED = 8
MAX_PREVIEW = 256 << 20  # bytes of a table the page previews (it reads only the row groups of one page)
STATUSES = ("running", "stale", "done", "failed")
_COLUMNS = {"name": "name", "nonce": "nonce", "status": "status", "steps": "last_seq", "nodes": "nodes",
            "created": "created", "updated": "updated", "checkpoints": "checkpoints", "artifacts": "artifacts"}


def _ui(request: Request):
    return request.app.state.ui


def _lineage(text: str) -> tuple[str, str]:
    found = parse_lineage(text)
    if found is None:
        raise Missing(f"no run {text!r}: expected NAME@NONCE, e.g. grokking.train@7f3a2c")
    return found


# ---- runs ------------------------------------------------------------------------------------------

def runs(request: Request) -> Response:
    """Every lineage, one row each: filter by text and status, sort by any column or metric."""
    ui, params = _ui(request), request.query_params
    all_keys = value_keys(ui.store)
    chosen = [k for k in params.getlist("key") if k in all_keys]
    rows = with_liveness(ui.store.store, lineage_rows(ui.store, chosen or None))
    keys = chosen or sorted({k for row in rows for k in row.values}, key=all_keys.index)
    text, status = params.get("q", "").strip(), params.get("status", "")
    if text:
        rows = [r for r in rows if text.lower() in r.lineage.lower()]
    if status in STATUSES:
        rows = [r for r in rows if r.status == status]
    all_config = sorted({k for row in rows for k in row.config})
    # by default: keys that tell the runs apart, as many as fit beside the metrics in a 1280-pixel window
    shown = default_columns(rows, max(MIN_CONFIG_COLUMNS, min(DEFAULT_CONFIG_COLUMNS, MAX_COLUMNS - len(keys))))
    configs = [k for k in params.getlist("cfg") if k in all_config] if "cfg" in params else shown
    sort, descending = params.get("sort", "created"), params.get("desc", "1" if "sort" not in params else "0") == "1"
    rows = _sorted(rows, sort, descending)
    links = {column: _sort_link(params, column, sort, descending) for column in [*_COLUMNS, *keys, *configs]}
    return ui.page("runs.html", title="Runs", rows=rows, keys=keys, all_keys=all_keys, chosen=chosen, q=text,
                   configs=configs, all_config=all_config,
                   status=status, statuses=STATUSES, sort=sort, descending=descending, links=links,
                   sweeps=sweep_tags(ui.store, [(r.name, r.nonce, r.last_seq) for r in rows]),
                   stamp=stamp(ui.store), stamp_url="/api/stamp")


def _value(row: LineageRow, key: str) -> Any:
    return row.config.get(key) if key.startswith("config/") else row.values.get(key)


def _sorted(rows: list[LineageRow], sort: str, descending: bool) -> list[LineageRow]:
    """Rows ordered by a column, a metric or a config key; rows without it come last (text after numbers)."""
    if sort in _COLUMNS:
        return sorted(rows, key=lambda r: getattr(r, _COLUMNS[sort]), reverse=descending)
    numbers = [r for r in rows if isinstance(_value(r, sort), (int, float))]
    texts = [r for r in rows if isinstance(_value(r, sort), str)]
    rest = [r for r in rows if r not in numbers and r not in texts]
    return (sorted(numbers, key=lambda r: _value(r, sort), reverse=descending)
            + sorted(texts, key=lambda r: _value(r, sort), reverse=descending) + rest)


def _sort_link(params, column: str, sort: str, descending: bool) -> str:
    query = [(k, v) for k, v in params.multi_items() if k not in ("sort", "desc")]
    flip = "0" if column == sort and descending else "1"
    return "/?" + urlencode([*query, ("sort", column), ("desc", flip)])


def compare(request: Request) -> Response:
    """The runs ticked on the runs page, overlaid on the first one's run page."""
    chosen = [_lineage(text) for text in request.query_params.getlist("run")]
    if not chosen:
        return RedirectResponse("/", status_code=303)
    first, *others = (f"{name}@{nonce}" for name, nonce in chosen)
    query = urlencode([("with", other) for other in others])
    return RedirectResponse(f"/run/{first}" + (f"?{query}" if query else ""), status_code=303)


# ---- one run ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Compared:
    """A lineage drawn on the run page, with the colour slot of its curves."""

    lineage: tuple[str, str]
    slot: int

    @property
    def label(self) -> str:
        return f"{self.lineage[0]}@{self.lineage[1]}"


def run(request: Request) -> Response:
    """One lineage: its curves (chosen keys, log scale, other runs overlaid), flip-books and timeline."""
    ui, params = _ui(request), request.query_params
    lineage = _lineage(request.path_params["lineage"])
    summary = with_liveness(ui.store.store, lineage_rows(ui.store, keys=[], only=lineage))
    if not summary:
        raise Missing(f"no run {lineage[0]}@{lineage[1]}")
    known = lineage_ids(ui.store)
    others = [parse_lineage(text) for text in params.getlist("with")]
    others = [o for o in dict.fromkeys(others) if o is not None and o != lineage and o in known][:MAX_COMPARED]
    drawn = [Compared(lin, slot) for slot, lin in enumerate([lineage, *others])]
    keys = list(dict.fromkeys(k for c in drawn for k in lineage_keys(ui.store, c.lineage)))
    chosen = [k for k in params.getlist("key") if k in keys] or headline_keys(summary[0].config, keys)
    log = params.get("log") == "1"
    curves = [load_curves(ui.store, c.lineage, chosen) for c in drawn]
    texts = text_keys(curves, chosen)  # no numbers to draw: shown as text
    charts = [chart(key, [Line(c.label, *curve.points[key], slot=c.slot) for c, curve in zip(drawn, curves)], log)
              for key in chosen if key not in texts]
    rows = [summary[0] if c.slot == 0 and not texts else lineage_rows(ui.store, keys=texts, only=c.lineage)[0]
            for c in drawn]
    values = [(key, [(c, r.values[key]) for c, r in zip(drawn, rows) if key in r.values]) for key in texts]
    details = [lineage_detail(ui.store, c.lineage) for c in drawn]
    config_diff = [(k, [r.config.get(k) for r in rows]) for k in differing(rows)] if others else []
    return ui.page("run.html", title=f"{lineage[0]}@{lineage[1]}", row=summary[0], detail=details[0],
        books=side_by_side([c.label for c in drawn], details), config_diff=config_diff,
        config_unshared=unshared(rows) if others else [], texts=values,
        keys=keys, chosen=chosen, log=log, drawn=drawn, charts=charts, curves=curves,
        others=[f"{n}@{x}" for n, x in known if (n, x) != lineage], compared=[c.label for c in drawn[1:]],
        sweeps=sweep_tags(ui.store, [(r.name, r.nonce, r.last_seq) for r in rows]),
        crosscoders=crosscoders_of(ui.store, lineage),
        stamp=stamp(ui.store, lineage), stamp_url=f"/api/stamp?{urlencode({'lineage': drawn[0].label})}")


def curves_json(curves: Curves) -> dict[str, Any]:
    """A lineage's curves as JSON: key -> {seq: [...], value: [...], count}, and its resume points."""
    return {"lineage": curves.label, "resumes": curves.resumes,
            "curves": {key: {"seq": xs, "value": ys, "count": curves.counts[key]}
                       for key, (xs, ys) in curves.points.items()}}


# ---- one node, one artifact ------------------------------------------------------------------------

@dataclass
class Shown:
    """An artifact version as a page shows it: its row, its kind and what to show of its content."""

    info: ArtifactInfo
    kind: str
    text: str = ""
    cut: bool = False
    table: Any = None
    problem: str = ""
    graph: bool = False  # an attribution graph file: the node page links its graph page
    folded: str = ""  # why a table sits outlined in a closed fold on its node page (large, a cache); "" when not


def show(ui, node: Node, info: ArtifactInfo, page: int = 0, fold: bool = False) -> Shown:
    """Read what the page shows of one artifact version: text, pretty JSON or a table page (figures load apart);
    with `fold`, a large or cached table only outlined (its footer)."""
    kind = content.kind(info.filename)
    shown = Shown(info, kind, folded=fold_reason(info.name, info.size) if fold and kind == "table" else "")
    if kind in ("figure", "binary"):
        return shown
    if kind == "table":
        if info.size > MAX_PREVIEW and not shown.folded:
            shown.problem = f"too large to preview here ({info.size} bytes): download it"
            return shown
        try:
            file = artifact_file(ui.store, info)
            shown.table = outline(file) if shown.folded else preview(file, page)
        except (TableError, Missing) as error:
            shown.problem = str(error)
    else:
        try:
            head = artifact_head(ui.store, info, content.MAX_TEXT + 1)
        except Missing as error:
            shown.problem = str(error)
            return shown
        shown.text, shown.cut = content.readable(head, as_json=kind == "json", size=info.size)
        shown.graph = kind == "json" and not shown.cut and is_graph(shown.text)
    return shown


def node(request: Request) -> Response:
    """One node: status, values, config, checkpoint, parents and children, and every artifact shown."""
    ui = _ui(request)
    target = parse_node(request.path_params["address"])
    detail = node_detail(ui.store, target)
    if detail.status == "running" and stale(ui.store.store, [target.lineage]):
        detail.status = "stale"
    shown = [show(ui, target, info, fold=True) for info in detail.artifacts]
    return ui.page("node.html", title=target.address, detail=detail, shown=shown, config=_flat(detail.config),
                   stamp=stamp(ui.store, target.lineage),
                   stamp_url=f"/api/stamp?{urlencode({'lineage': f'{target.name}@{target.nonce}'})}")


def view(request: Request) -> Response:
    """One artifact version on its own page (older versions, and the pages of a table)."""
    ui, params = _ui(request), request.query_params
    target = parse_node(request.path_params["address"])
    info = artifact_info(ui.store, target, request.path_params["name"], number(params.get("version"), "version"))
    return ui.page("view.html", title=f"{info.name} on {target.address}", node=target,
                   item=show(ui, target, info, number(params.get("page"), "page") or 0))


def graph(request: Request) -> Response:
    """An attribution graph artifact drawn by static/graph.js (thresholds, pins, hover cards); `with=NODE/NAME`
    (and `with_version=N`) draws a second graph beside it, the nodes only one of them has marked (`compare=NODE/NAME`:
    the comparison to mark them by, else one found on either node)."""
    ui, params = _ui(request), request.query_params
    target = parse_node(request.path_params["address"])
    shown = [load_graph(ui.store, target, request.path_params["name"], number(params.get("version"), "version"))]
    marks = None
    if params.get("with"):
        shown.append(load_address(ui.store, params["with"], number(params.get("with_version"), "with_version")))
        marks = side_by_side_marks(ui.store, shown, params.get("compare"))
        for view, pane in zip(shown, marks.panes):
            view.data["marks"] = pane
    first = shown[0]
    return ui.page("graph.html", title=f"graph {first.info.name} on {target.address}", graphs=shown, marks=marks)



def _flat(config: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """A config as (path, value) rows: nested mappings joined with `/`."""
    if not isinstance(config, dict):
        return [] if config is None else [(prefix or "(config)", config)]
    rows: list[tuple[str, Any]] = []
    for key, value in config.items():
        path = f"{prefix}/{key}" if prefix else str(key)
        rows += _flat(value, path) if isinstance(value, dict) and value else [(path, value)]
    return rows
