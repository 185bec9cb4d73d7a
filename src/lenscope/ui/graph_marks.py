"""What the side-by-side graph page marks: the nodes only one of the two graphs has, and those whose value changed
(at least doubled or halved), read from the table `compare_attribution_graphs` saved on either graph's node (its
NAME.json names the two graphs and their versions; `compare=NODE/NAME` names another), else by node id when both
graph files name one transcoder node (a feature's id is then its layer, latent and position in both)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from lenscope.store import StoreReader
from lenscope.store.parquet_reader import ParquetError, read_table
from lenscope.ui.graph_page import GraphView
from lenscope.ui.nodes import Missing, artifact_content, artifact_file, artifact_info, parse_node

OP = "compare_attribution_graphs"  # the op's name: its summary NAME.json and table NAME.parquet
MAX_SUMMARY_BYTES = 1 << 20
MAX_TABLE_BYTES = 64 << 20
MAX_TABLE_ROWS = 1 << 20  # a comparison table's rows (one per node and edge it compares), by its footer
MAX_DECODED = 128 << 20  # and their decoded bytes
MARKS = {"appears": "only", "vanishes": "only", "changed": "changed", "kept": "kept"}


@dataclass
class Marks:
    """How the two graphs were matched (`how`: table, ids or "" for not at all), from what (`source`: the comparison's
    NODE/NAME, or the transcoders' node), and per pane each node's mark: id -> {mark, here, there}."""

    how: str = ""
    source: str = ""
    match: str = ""  # the comparison's feature matching: decoder or identity
    panes: list[dict[str, dict[str, Any]]] = field(default_factory=lambda: [{}, {}])
    problem: str = ""  # why a comparison found for the two graphs was not used

    @property
    def href(self) -> str:
        """The comparison's summary page (how == "table")."""
        address, _, name = self.source.partition("/")
        return f"/view/{quote(address, safe='')}/{quote(name, safe='')}"

    def count(self, mark: str) -> int:
        """How many nodes of both panes carry `mark`."""
        return sum(entry["mark"] == mark for pane in self.panes for entry in pane.values())


def _address(view: GraphView) -> tuple[str, int]:
    return f"{view.node.address}/{view.info.name}", view.info.version


def _summary(store: StoreReader, node: Any, name: str) -> dict[str, Any] | None:
    """A comparison's summary (its JSON artifact), or None when there is none readable."""
    try:
        info = artifact_info(store, node, name)
        if info.size > MAX_SUMMARY_BYTES or not info.filename.endswith(".json"):
            return None
        summary = json.loads(artifact_content(store, info))
    except (Missing, ValueError):
        return None
    return summary if isinstance(summary, dict) and isinstance(summary.get("table"), str) else None


def _compares(summary: dict[str, Any], views: list[GraphView]) -> bool | None:
    """Whether a summary compares the two graphs shown: True in their order, False swapped, None not them."""
    pair = [(summary.get("graph_a"), summary.get("version_a")), (summary.get("graph_b"), summary.get("version_b"))]
    shown = [_address(view) for view in views]
    return True if pair == shown else False if pair == shown[::-1] else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _table_marks(store: StoreReader, node: Any, summary: dict[str, Any], in_order: bool) -> list[dict[str, Any]]:
    """Each pane's marks from the comparison table: a pane showing graph A marks A's nodes (vanishes: only here)."""
    info = artifact_info(store, node, summary["table"])
    if info.size > MAX_TABLE_BYTES:
        raise Missing(f"the comparison table {info.name!r} on {node} is too large to read ({info.size} bytes)")
    try:
        rows = read_table(artifact_file(store, info), f"the comparison table {info.name!r} on {node}",
                          max_rows=MAX_TABLE_ROWS, max_bytes=MAX_DECODED,
                          columns=["item", "node_a", "node_b", "status", "value_a", "value_b"]).to_pylist()
    except ParquetError as error:
        raise Missing(str(error)) from None
    sides: list[dict[str, Any]] = [{}, {}]
    for row in rows:  # a foreign value (a list where a name belongs) is skipped, not a failed page
        if row["item"] != "node" or not isinstance(row["status"], str) or row["status"] not in MARKS:
            continue
        for k, (here, there) in enumerate((("a", "b"), ("b", "a"))):
            if isinstance(row[f"node_{here}"], str) and row[f"node_{here}"]:
                sides[k][row[f"node_{here}"]] = {"mark": MARKS[row["status"]], "here": _number(row[f"value_{here}"]),
                                                 "there": _number(row[f"value_{there}"])}
    return sides if in_order else sides[::-1]


def _comparison(store: StoreReader, views: list[GraphView], named: str | None) -> tuple[Any, str, dict, bool] | None:
    """(node, name, summary, in order) of the comparison of the graphs shown: `named` (NODE/NAME), else the op's on
    the second graph's node or the first's; None when there is none."""
    if named:
        address, _, name = named.partition("/")
        node, name = parse_node(address), name or OP
        summary = _summary(store, node, name)
        order = None if summary is None else _compares(summary, views)
        if order is None:
            shown = " and ".join(f"{where} (version {version})" for where, version in map(_address, views))
            raise Missing(f"{node.address}/{name} is no comparison of the two graphs shown, {shown}: expected "
                          f"NODE/NAME of the summary {OP} saves")
        return node, name, summary, order
    for view in views[::-1]:
        summary = _summary(store, view.node, OP)
        order = None if summary is None else _compares(summary, views)
        if order is not None:
            return view.node, OP, summary, order
    return None


def side_by_side_marks(store: StoreReader, views: list[GraphView], named: str | None = None) -> Marks:
    """The marks of two graphs shown side by side (see the module's docstring)."""
    found, problem = _comparison(store, views, named), ""
    if found is not None:
        node, name, summary, in_order = found
        try:
            return Marks("table", f"{node.address}/{name}", str(summary.get("match", "")),
                         _table_marks(store, node, summary, in_order))
        except Missing as error:
            if named:
                raise
            problem = str(error)  # a comparison found but unreadable: the page is drawn without it
    scans = {view.scan for view in views}
    if len(scans) == 1 and "@" in views[0].scan:
        ids = [{node["id"] for node in view.data["nodes"]} for view in views]
        panes = [{node: {"mark": "only" if node not in ids[1 - k] else "kept", "here": None, "there": None}
                  for node in ids[k]} for k in range(2)]
        return Marks("ids", views[0].scan, "identity", panes, problem)
    return Marks(problem=problem)
