"""What each `lenscope` subcommand does; argument parsing lives in cli/main.py."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from ..config import hydrate, to_yaml
from ..errors import StoreError, UsageError, hint
from ..job_registry import jobs, resolve
from ..store import Node, Store
from ..store.config_keys import is_config_key
from ..store.leases import mark_stale
from ..store.store import STATUSES
from ..store.values import RESERVED_KEYS
from ..text import parse_value
from .hints import check_words, note_missing_keys
from .output import checked_filename, output_path, write_output

R = TypeVar("R")
_TEXT_KEYS = {"node", "name", "nonce", "status", "node_name", "filename", "sha256"}  # --where VALUE stays text
_NODE_COLUMNS = ("node", "name", "nonce", "seq", "status", "created", "checkpoint", "error")
_ARTIFACT_COLUMNS = ("node", "name", "version", "filename", "size")
_DEFAULT_VALUE_COLUMNS = 6


# ---- configure, jobs (run: cli/run.py) -----------------------------------------------------------------------

def cmd_configure(args: argparse.Namespace) -> int:
    """Print the job's whole config (defaults, or with the given sources) as commented YAML."""
    cls = resolve(args.job)
    sys.stdout.write(to_yaml(hydrate(cls.CONFIG, *args.sources)))
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    """List registered jobs, then the registered ops (marked [op]; run with --analysis), with their descriptions."""
    from ..analysis import op_registry as ops  # lazy: the op registry's layer loads JAX; ls/show/get start without it

    rows = [(name, _summary(cls)) for name, cls in jobs().items()]
    rows += [(name, f"[op] {_summary(ops.get(name))}") for name in ops.names()]
    width = max((len(name) for name, _ in rows), default=0)
    for name, text in rows:
        print(f"{name:<{width}}  {text}".rstrip())
    return 0


def _summary(cls: type) -> str:
    """The first paragraph of a class's docstring, on one line."""
    return " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())


# ---- store access -------------------------------------------------------------------------------

def open_store(where: str | None, readonly: bool = True) -> Store:
    """The store (read-only unless asked), checked readable; a missing one or another version is a usage error."""
    store = None
    try:
        store = Store(where, readonly=readonly)
        store.query().limit(0).count()
    except StoreError as err:
        if store is not None:
            store.close()
        raise UsageError(str(err)) from None
    return store


def _lookup(store: Store, address: str, read: Callable[[Node], R], artifact: str | None = None) -> R:
    """`read(node)`, turning 'no such node / artifact' store errors into usage errors (exit 2)."""
    node = Node.parse(address)
    try:
        return read(node)
    except StoreError as err:
        if not store.node_exists(node) or (artifact is not None and artifact not in store.artifact_names(node)):
            raise UsageError(str(err)) from None
        raise


# ---- ls -----------------------------------------------------------------------------------------

def _where_value(key: str, op: str, text: str) -> Any:
    """A --where VALUE read like every value typed on the command line (parse_value); `in` also takes a,b,c."""
    if key in _TEXT_KEYS and op != "in":
        return text
    value = parse_value(text)
    if op == "in" and not isinstance(value, list):
        value = [item if key in _TEXT_KEYS else parse_value(item) for item in text.split(",")]
    return value


def _query(store: Store, args: argparse.Namespace):
    """The store query the ls filters describe."""
    query = store.query()
    if args.lineage is not None:
        node = Node.parse(args.lineage)
        query = query.name(node.name).nonce(node.nonce)
    if args.name:
        query = query.name(*args.name)
    if args.nonce:
        query = query.nonce(*args.nonce)
    for status in args.status or ():
        if status not in STATUSES:
            raise UsageError(
                f"unknown status {status!r}; expected one of {', '.join(STATUSES)}{hint(status, STATUSES)}")
    if args.status:
        query = query.where("status", "in", list(args.status))
    if args.seq:
        query = query.seq(*args.seq)
    if args.checkpoint:
        query = query.checkpoint()
    if args.artifact is not None:
        query = query.artifact(args.artifact or None)
    for key, op, value in args.where:
        query = query.where(key, op, _where_value(key, op, value))
    sorts = args.sort or (["seq"] if args.lineage else ["created", "seq"] if args.desc else [])
    for key in sorts:
        query = query.sort(key, ascending=not args.desc)
    if args.limit is not None:
        query = query.limit(args.limit)
    return query


def _keys(text: str | None) -> list[str] | None:
    if text is None:
        return None
    keys = [k.strip() for k in text.split(",") if k.strip()]
    if not keys:
        raise UsageError(f"--keys {text!r} names no keys: expected K1,K2 (e.g. train/loss,val/accuracy)")
    return keys


def _plain(row: dict) -> dict:
    """A row without payload bytes, with paths as text: safe for JSON and tables."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in row.items() if k != "payload"}


_NODE_OPTIONS = ("lineage", "seq", "checkpoint", "artifact", "where", "sort", "latest", "keys")


def _per_node(args: argparse.Namespace) -> bool:
    """Whether `ls` lists nodes (asked for, or implied by a node-level option) rather than runs."""
    return args.nodes or any(getattr(args, option) not in (None, False, []) for option in _NODE_OPTIONS)


def cmd_ls(args: argparse.Namespace) -> int:
    """List runs (one row per lineage), or nodes or artifacts matching the filters: a table, JSON or addresses."""
    if not _per_node(args):
        return _ls_runs(args)
    keys = _keys(args.keys)
    with open_store(args.store) as store:
        query = _query(store, args)
        recorded = [k for k in keys or () if not is_config_key(k) and k not in RESERVED_KEYS]
        if recorded and args.artifact is None:  # the nodes that hold one of the values asked for, not every tick
            query = query.having(*recorded)
        if args.latest:
            latest = query.latest(keys)
            rows = [latest] if latest is not None else []
        else:
            rows = query.select(keys)
        if not rows:
            check_words(store, args)  # a typo in a name or key is an error with a hint, not "no nodes match"
        elif keys:
            note_missing_keys(store, keys, rows)  # a column of '-' only, said once with what was meant
        rows = mark_stale(store, rows)  # a running node whose job died shows as stale
    rows = [_plain(r) for r in rows]
    if args.json:
        print(_json(rows))
    elif args.quiet:
        for address in dict.fromkeys(r["node"] for r in rows):
            print(address)
    elif not rows:
        print("no " + ("artifacts" if args.artifact is not None else "nodes") + " match", file=sys.stderr)
    else:
        _print_table(rows, _columns(rows, args, keys))
    return 0


def _ls_runs(args: argparse.Namespace) -> int:
    """`ls` at run level: each lineage's latest node, status, steps, counts and latest main values."""
    for status in args.status or ():
        if status not in (*STATUSES, "stale"):
            raise UsageError(f"unknown status {status!r}{hint(status, STATUSES)}; "
                             f"statuses: {', '.join(STATUSES)}, stale")
    # lazy: the run table is the UI's; a `lenscope run` never loads the UI's modules
    from ..ui.lineage_list import lineage_rows, with_liveness
    with open_store(args.store) as store:
        names = {Node.clean_name(n) for n in args.name or ()}
        runs = [r for r in with_liveness(store, lineage_rows(store))
                if (not names or r.name in names) and (not args.nonce or r.nonce in args.nonce)
                and (not args.status or r.status in args.status)]
        if not runs:
            check_words(store, args)  # a typo in a name or nonce is an error with a hint, not "no runs match"
    runs = runs[: args.limit] if args.limit is not None else runs
    rows = [{"run": r.lineage, "node": f"{r.lineage}:{r.last_seq}", "status": r.status, "steps": r.last_seq,
             "nodes": r.nodes, "checkpoints": r.checkpoints, "artifacts": r.artifacts,
             "created": datetime.fromtimestamp(r.created).strftime("%Y-%m-%d %H:%M:%S"),
             "parents": list(r.parents), **r.values} for r in runs]
    if args.json:
        print(_json(rows))
    elif args.quiet:
        for row in rows:
            print(row["node"])
    elif not rows:
        print("no runs match", file=sys.stderr)
    else:
        values = list(dict.fromkeys(k for r in runs for k in r.values))
        _print_table(rows, ["node", "status", "steps", "checkpoints", "artifacts", "created", *values])
    return 0


def _columns(rows: list[dict], args: argparse.Namespace, keys: list[str] | None) -> list[str]:
    """Table columns: identity, then the keys asked for, filtered or sorted on, then the most common values."""
    if args.artifact is not None:
        fixed = list(_ARTIFACT_COLUMNS)
        fixed += ["checkpoint"] if args.checkpoint else []
        return fixed + [k for k in (keys or []) if k not in fixed]
    fixed = ["node", "status"] + (["checkpoint"] if args.checkpoint else [])
    present = Counter(k for r in rows for k in r if k not in _NODE_COLUMNS)
    if keys is not None:
        return fixed + keys
    chosen = [k for k in [w[0] for w in args.where] + (args.sort or []) if k in present]
    ranked = sorted(present, key=lambda k: (not _is_metric(k), -present[k], k))
    return fixed + list(dict.fromkeys(chosen + ranked))[:_DEFAULT_VALUE_COLUMNS]


def _is_metric(key: str) -> bool:
    """Losses and accuracies: the values a reader of a run table looks for first."""
    last = key.rsplit("/", 1)[-1]
    return "loss" in last or "acc" in last


def _print_table(rows: list[dict], cols: list[str]) -> None:
    cells = [[_fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    for line in [cols] + cells:
        print("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip())


def _json(data: Any) -> str:
    """Strict JSON (NaN and infinities become the strings "nan", "inf", "-inf"), for jq and friends."""
    def finite(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [finite(v) for v in value]
        return value

    return json.dumps(finite(data), indent=2, allow_nan=False)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


# ---- show, get ----------------------------------------------------------------------------------

def cmd_show(args: argparse.Namespace) -> int:
    """Show one node: status, lineage, values, artifacts, checkpoint and config."""
    with open_store(args.store) as store:
        record = _lookup(store, args.node, store.get)
        children = store.children(record.node)
        made = {r["name"]: r["provenance"] for r in store.query().node(record.node).artifact().select()}
        status = mark_stale(store, [{"node": str(record.node), "status": record.status}])[0]["status"]
    data = {
        "node": str(record.node), "status": status, "error": record.error, "created": record.created,
        "parents": [str(p) for p in record.parents], "children": [str(c) for c in children],
        "checkpoint": str(record.checkpoint) if record.checkpoint else None,
        "values": record.values,
        "artifacts": {name: {"filename": p.filename, "size": p.size, "provenance": made.get(name)}
                      for name, p in record.artifacts.items()},
        "config": record.config,
    }
    if args.json:
        print(_json(data))
        return 0
    created = datetime.fromtimestamp(record.created).isoformat(sep=" ", timespec="seconds")
    head = [("node", data["node"]), ("status", data["status"]), ("error", data["error"]), ("created", created),
            ("parents", ", ".join(data["parents"])), ("children", ", ".join(data["children"])),
            ("checkpoint", data["checkpoint"])]
    for label, value in head:
        if label != "error" or value:
            print(f"{label:<11} {value or '-'}")
    _section("values", ((k, _shown(v)) for k, v in sorted(data["values"].items())))
    _section("artifacts", ((name, f"{meta['filename']} ({meta['size']} bytes){_made_by(meta['provenance'])}")
                           for name, meta in sorted(data["artifacts"].items())))
    _section("config", ((k, _shown(v)) for k, v in _flatten(data["config"] or {})))
    return 0


SHOW_CHARS = 200  # a value or setting longer than this (a corpus's file list) is cut on its line; --json has it whole


def _shown(value: Any) -> str:
    """A value as `show` prints it on one line: cut after SHOW_CHARS characters, saying how long it is."""
    text = _fmt(value)
    if len(text) <= SHOW_CHARS:
        return text
    items = f"{len(value)} items, " if isinstance(value, (list, tuple)) else ""
    return f"{text[:SHOW_CHARS - 40]}... ({items}{len(text)} characters; show --json prints it whole)"


def _made_by(provenance: dict | None) -> str:
    """`  by CLASS (FILE, source sha256 PREFIX, lenscope VERSION)` for an artifact whose provenance was recorded."""
    if not provenance:
        return ""
    facts = [provenance.get("source_file"), provenance.get("source_sha256", "")[:12] or None,
             f"lenscope {provenance['lenscope']}" if provenance.get("lenscope") else None]
    return f"  by {provenance.get('class', '?')} ({', '.join(f for f in facts if f)})"


def _section(title: str, items: Iterable[tuple[str, str]]) -> None:
    items = list(items)
    print(f"{title}:" if items else f"{title}: -")
    width = max((len(k) for k, _ in items), default=0)
    for key, text in items:
        print(f"  {key:<{width}}  {text}")


def _flatten(tree: dict, prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        out += _flatten(value, path + "/") if isinstance(value, dict) and value else [(path, value)]
    return out


def cmd_get(args: argparse.Namespace) -> int:
    """Write an artifact's exact bytes to a file (atomically) or stdout."""
    with open_store(args.store) as store:
        payload = _lookup(store, args.node, lambda n: _artifact(store, n, args.name, args.version), args.name)
    checked_filename(payload.filename, f"artifact {args.name!r} on {args.node}")
    out = output_path(args.output, payload.filename) if args.output else None  # checked before any byte is read
    if out is None:
        for piece in payload.chunks():  # streamed: a large artifact is never whole in memory
            sys.stdout.buffer.write(piece)
        sys.stdout.buffer.flush()
        return 0
    written = write_output(out, payload.chunks())
    print(f"wrote {out} ({written} bytes)", file=sys.stderr)
    return 0


def _artifact(store: Store, node: Node, name: str, version: int | None):
    """The artifact payload; an unknown version is a usage error listing the stored ones."""
    try:
        return store.artifact(node, name, version=version, lazy=True)
    except StoreError as err:
        if version is None or name not in store.artifact_names(node):
            raise
        versions = [v for v, _ in store.artifact_history(node, name)]
        if version in versions:
            raise
        raise UsageError(f"{err}; stored versions: {', '.join(map(str, versions))}") from None
