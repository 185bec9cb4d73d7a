"""`lenscope diff RUN RUN ...`: the config keys that differ and the final values, side by side."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ..errors import UsageError
from ..store import Node, Store
from ..store.config_keys import flatten
from ..store.lineage_heads import values_up_to
from .commands import _fmt, _json, _lookup, open_store

_RUN_HELP = "a node NAME@NONCE:SEQ, or a run NAME@NONCE (its latest node)"


def add_parser(sub: argparse._SubParsersAction, make: Callable[..., argparse.ArgumentParser]) -> None:
    """The `diff` subparser (`make(sub, name, help, description)` adds the shared options)."""
    diff = make(sub, "diff", "compare runs: the config keys that differ and the final values, side by side",
                "Compare two or more runs (or nodes): the config keys whose values differ (all of them with "
                "--all), then each value key's latest value up to that node, one column per run.")
    diff.add_argument("runs", nargs="+", metavar="RUN", help=_RUN_HELP)
    diff.add_argument("--all", action="store_true", help="every config key, also those that are the same")
    diff.add_argument("--json", action="store_true", help="print {config: {key: [...]}, values: {...}} as JSON")
    diff.set_defaults(handler=cmd_diff)


def resolve_run(store: Store, text: str) -> Node:
    """The node a RUN names: the address itself, or the latest node of lineage NAME@NONCE."""
    # lazy: the UI's lineage parser loads only for diff and export, not with every command
    from ..ui.lineage_list import parse_lineage
    lineage = parse_lineage(text) if ":" not in text else None
    if lineage is None:
        node = Node.parse(text)
        _lookup(store, text, store.status)
        return node
    row = store.query().name(lineage[0]).nonce(lineage[1]).latest(keys=[])
    if row is None:
        raise UsageError(f"no run {text!r} in this store (see `lenscope ls`); expected {_RUN_HELP}")
    return Node.parse(row["node"])


def compare(store: Store, nodes: list[Node], every: bool = False) -> dict[str, dict[str, list[Any]]]:
    """{"config": {key: [value per node]}, "values": {...}}: config keys that differ (or all), every value key."""
    configs = [flatten(store.config(node) or {}) for node in nodes]
    values = [values_up_to(store, node) for node in nodes]
    missing = object()

    def table(dicts: list[dict], only_differing: bool) -> dict[str, list[Any]]:
        keys = sorted({k for d in dicts for k in d})
        rows = {k: [d.get(k, missing) for d in dicts] for k in keys}
        if only_differing:
            rows = {k: row for k, row in rows.items() if any(v != row[0] or type(v) is not type(row[0])
                                                             for v in row)}
        return {k: [None if v is missing else v for v in row] for k, row in rows.items()}

    return {"config": table(configs, not every), "values": table(values, False)}


def cmd_diff(args: argparse.Namespace) -> int:
    """Print the config keys that differ between the runs and their final values, one column per run."""
    if len(args.runs) < 2:
        raise UsageError(f"diff needs at least two runs to compare, got {len(args.runs)}: {_RUN_HELP}")
    with open_store(args.store) as store:
        nodes = [resolve_run(store, text) for text in args.runs]
        result = compare(store, nodes, args.all)
    if args.json:
        print(_json({"nodes": [str(n) for n in nodes], **result}))
        return 0
    header = ["key", *map(str, nodes)]
    rows = [["config:", *[""] * len(nodes)]]
    rows += [[f"  {k}", *map(_fmt, row)] for k, row in result["config"].items()] or [["  (same)", *[""] * len(nodes)]]
    rows += [["values:", *[""] * len(nodes)]]
    rows += [[f"  {k}", *map(_fmt, row)] for k, row in result["values"].items()] or [["  -", *[""] * len(nodes)]]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0
