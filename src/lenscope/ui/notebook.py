"""The UI's own pages in a notebook, without a server: an attribution graph page and a feature-dashboard page rendered
from the same templates and scripts as `lenscope ui`, their static CSS and JavaScript inlined, shown in an iframe's
`srcdoc` (`_repr_html_`). Nothing is fetched: the page holds its data, styles and scripts.

    import lenscope.ui.notebook as notebook
    notebook.graph("graph.json")                       # a circuit-tracer graph file (path, JSON text or dict)
    notebook.stored_graph(store, node, "compute_attribution_graph")
    notebook.feature(store.artifact(node, "features.parquet").content, latent=3)
    notebook.stored_feature(store, node, "features.parquet", latent=3)

The links of a page (to nodes, artifacts, other features) lead to `lenscope ui`'s routes, which a notebook does
not serve; the drawing, thresholds, pins and hover cards work inside the frame. Needs the `ui` extra (Jinja2).
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from lenscope.errors import UsageError
from lenscope.store import Node, StoreReader
from lenscope.ui.app import templates
from lenscope.ui.features import feature_context, table_rows
from lenscope.ui.graph_cards import dashboard_cards
from lenscope.ui.graph_check import KEYS, GraphError, check_graph, parse_graph
from lenscope.ui.graph_page import GraphView, _file_scores, _kind, _number, load_graph, page_data
from lenscope.ui.nodes import ArtifactInfo, Missing, artifact_file, artifact_info

__all__ = ["NotebookPage", "feature", "graph", "inline_static", "stored_feature", "stored_graph"]

SHOWN_AS = "notebook (no server)"  # the page header's store line
_STYLESHEET = re.compile(r'<link rel="stylesheet" href="/static/([\w.-]+\.css)">')
_ICON = re.compile(r'<link rel="icon" href="/static/[^"]*"[^>]*>')
_SCRIPT = re.compile(r'<script src="/static/([\w.-]+\.js)"( defer)?></script>')
# In a srcdoc frame the page's URL is about:srcdoc: writing pins and thresholds into it may be refused; keep drawing.
_SRCDOC_GUARD = ("<script>(function () { var replace = history.replaceState.bind(history); history.replaceState = "
                 "function () { try { replace.apply(null, arguments); } catch (e) { /* about:srcdoc */ } }; })();"
                 "</script>")


def _static(name: str) -> str:
    """A static file's text, safe inside a <script> or <style> element (no closing tag can occur in it)."""
    text = (resources.files("lenscope.ui") / "static" / name).read_text(encoding="utf-8")
    return text.replace("</", "<\\/")


def inline_static(page: str) -> str:
    """`page` with its /static/ stylesheets and scripts inlined (deferred scripts at the end of the body, in
    order, as the browser would run them) and its icon link dropped: a page that loads nothing."""
    deferred: list[str] = []

    def script(match: re.Match[str]) -> str:
        code = f"<script>{_static(match[1])}</script>"
        if match[2]:
            deferred.append(code)
            return ""
        return code

    page = _ICON.sub("", page)
    page = _STYLESHEET.sub(lambda m: f"<style>{_static(m[1])}</style>", page)
    page = _SCRIPT.sub(script, page)
    head, _, rest = page.partition("<head>")
    page = f"{head}<head>{_SRCDOC_GUARD}{rest}" if rest else page
    return page.replace("</body>", "".join(deferred) + "</body>", 1)


@dataclass(frozen=True)
class NotebookPage:
    """One UI page, self-contained: `html` the whole page (save it to open in a browser); in a notebook, a frame."""

    html: str
    title: str
    height: int = 720

    def _repr_html_(self) -> str:
        return (f'<iframe srcdoc="{html.escape(self.html, quote=True)}" title="{html.escape(self.title)}" '
                f'style="width:100%;height:{self.height}px;border:1px solid #ccc" loading="lazy"></iframe>')

    def save(self, path: str | Path) -> Path:
        """Write the page as an HTML file."""
        target = Path(path)
        target.write_text(self.html, encoding="utf-8")
        return target


def _render(template: str, title: str, frame_height: int, /, **context: Any) -> NotebookPage:
    """A UI template rendered with `context`, its static files inlined (the template's own `height` stays free)."""
    page = templates().get_template(template).render(store=SHOWN_AS, title=title, **context)
    return NotebookPage(inline_static(page), title, frame_height)


def _document(source: Any) -> dict[str, Any]:
    """A graph file's document from a dict, JSON text or bytes, or a path to the file."""
    if isinstance(source, dict):
        document = source if set(KEYS) <= set(source) else None
    elif isinstance(source, Path) or (isinstance(source, str) and not source.lstrip().startswith("{")):
        path = Path(source).expanduser()
        if not path.is_file():
            raise UsageError(f"graph {str(source)!r}: no such file; expected a circuit-tracer graph file (.json), "
                             "its JSON text or its parsed dict")
        document = parse_graph(path.read_bytes())
    elif isinstance(source, str | bytes):
        document = parse_graph(source.encode() if isinstance(source, str) else source)
    else:
        raise UsageError(f"graph: got a {type(source).__name__}; expected a circuit-tracer graph file (.json), "
                         "its JSON text or its parsed dict")
    if document is None:
        raise UsageError("graph: not an attribution graph file (expected JSON with metadata, nodes and links, as "
                         "compute_attribution_graph saves it)")
    try:
        check_graph(document)
    except GraphError as error:
        raise UsageError(f"graph: cannot be drawn: {error}") from None
    return document


def graph(source: Any, *, name: str = "attribution graph", store: StoreReader | None = None,
          height: int = 760) -> NotebookPage:
    """The graph page of a circuit-tracer graph file (a path, its JSON text or its dict); with `store`, the hover
    cards of the features its metadata's `scan` names (their dashboards on the transcoders' node)."""
    document = json.loads(json.dumps(_document(source)))  # a copy of plain JSON values (numbers, not arrays)
    metadata = document["metadata"]
    scan = str(metadata.get("scan", ""))
    features = {(int(n["layer"]), int(n["node_id"].split("_")[1])) for n in document["nodes"]
                if _kind(n) == "feature"}
    cards = dashboard_cards(store, scan, features) if store is not None else {}
    size = len(json.dumps(document))
    view = GraphView(SimpleNamespace(address="notebook"), ArtifactInfo(name, 1, f"{name}.json", "", size, 0.0, (1,)),
                     list(metadata.get("prompt_tokens", [])), page_data(document, cards), _file_scores(metadata),
                     _number(metadata.get("node_threshold")), scan)
    return _render("graph.html", f"graph {name}", height, graphs=[view], marks=None)


def stored_graph(store: StoreReader, node: Node | str, name: str, version: int | None = None,
                 height: int = 760) -> NotebookPage:
    """The graph page of graph artifact `name` on a store's node, as `lenscope ui` draws it (scores, cards)."""
    try:
        view = load_graph(store, Node.coerce(node), name, version)
    except Missing as missing:
        raise UsageError(str(missing)) from None
    return _render("graph.html", f"graph {name} on {view.node.address}", height, graphs=[view], marks=None)


def feature(table: bytes | str | Path, latent: int, *, step: int | None = None, name: str = "features.parquet",
            address: str = "notebook", height: int = 760) -> NotebookPage:
    """The dashboard page of one latent of a dashboard table (features.parquet: its bytes or path);
    `step`: a crosscoder's checkpoint shown in full."""
    rows = table_rows(Path(table) if isinstance(table, str) else table, name)
    row = next((r for r in rows if str(r["latent"]) == str(latent)), None)
    if row is None:
        shown = ", ".join(str(r["latent"]) for r in rows[:20])
        raise UsageError(f"latent {latent} has no dashboard in {name}; its latents: {shown or 'none'}"
                         f"{', ...' if len(rows) > 20 else ''}")
    try:
        context = feature_context(row, None if step is None else str(step))
    except Missing as missing:
        raise UsageError(str(missing)) from None
    return _render("feature.html", f"feature {latent}", height, node=SimpleNamespace(address=address), name=name,
                   **context)


def stored_feature(store: StoreReader, node: Node | str, name: str, latent: int, *, step: int | None = None,
                   height: int = 760) -> NotebookPage:
    """The dashboard page of one latent of dashboard table `name` (features.parquet) on a store's node."""
    node = Node.coerce(node)
    try:
        path = artifact_file(store, artifact_info(store, node, name))
    except Missing as missing:
        raise UsageError(str(missing)) from None
    return feature(path, latent, step=step, name=name, address=node.address, height=height)
