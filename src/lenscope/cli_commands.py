"""What each `lenscope` subcommand does; argument parsing lives in cli.py."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from .config import hydrate, to_yaml
from .errors import UsageError
from .registry import jobs, resolve
from .runner import run_job
from .store import Node, Store


def cmd_run(args: argparse.Namespace) -> int:
    """Run a job (or analyses on its state) and print `node <address>` last."""
    if args.branch and not args.base:
        raise UsageError("--branch needs --base NODE (the node to branch from)")
    if args.analysis:
        from .runner import run_analyses

        node = run_analyses(args.job, args.analysis, args.sources, base=args.base, store=args.store)
    else:
        node = run_job(args.job, args.sources, base=args.base, branch=args.branch, store=args.store)
    print(f"node {node}", flush=True)
    return 0


def cmd_configure(args: argparse.Namespace) -> int:
    """Print the job's whole config (defaults, or with the given sources) as commented YAML."""
    cls = resolve(args.job)
    config = hydrate(cls.CONFIG, *args.sources)
    sys.stdout.write(to_yaml(config))
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    """List registered jobs with their one-line description."""
    for name, cls in jobs().items():
        doc = (cls.__doc__ or "").strip().splitlines()
        print(f"{name:<28} {doc[0] if doc else ''}")
    return 0


def _query(store: Store, args: argparse.Namespace):
    query = store.query()
    if args.lineage:
        node = Node.parse(args.lineage)
        query = query.name(node.name).nonce(node.nonce)
    if args.name:
        query = query.name(Node.clean_name(args.name))
    if args.nonce:
        query = query.nonce(args.nonce)
    if args.seq is not None:
        query = query.seq(args.seq)
    if args.checkpoint:
        query = query.checkpoint()
    if args.artifact is not None:
        query = query.artifact(args.artifact or None)
    for key, op, value in args.where:
        query = query.where(key, op, _scalar(value))
    query = query.sort(args.sort or "seq", ascending=not args.desc) if (args.sort or args.lineage) else query
    if args.limit is not None:
        query = query.limit(args.limit)
    return query


def _scalar(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _plain(row: dict) -> dict:
    """A row without payload bytes, safe for JSON and tables."""
    return {k: v for k, v in row.items() if k != "payload"}


def cmd_ls(args: argparse.Namespace) -> int:
    """List nodes or artifacts matching the filters."""
    with Store(args.store) as store:
        rows = [_plain(r) for r in _query(store, args).select()]
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if args.artifact is not None:
        cols = ["node", "name", "version", "filename", "size"]
    else:
        cols = ["node", "status"] + sorted({k for r in rows for k in r} - {"node", "name", "nonce", "seq", "status", "created"})[:6]
    _print_table(rows, cols)
    return 0


def _print_table(rows: list[dict], cols: list[str]) -> None:
    cells = [[_fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def cmd_show(args: argparse.Namespace) -> int:
    """Show one node: status, parents, values, artifacts and checkpoint."""
    with Store(args.store) as store:
        record = store.get(args.node)
    data = {
        "node": str(record.node), "status": record.status,
        "parents": [str(p) for p in record.parents],
        "checkpoint": str(record.checkpoint) if record.checkpoint else None,
        "values": record.values,
        "artifacts": {name: {"filename": p["filename"], "size": len(p["content"])} for name, p in record.artifacts.items()},
        "config": record.config,
    }
    if args.json:
        print(json.dumps(data, indent=2, default=str))
        return 0
    print(f"node        {data['node']}\nstatus      {data['status']}")
    print(f"parents     {', '.join(data['parents']) or '-'}\ncheckpoint  {data['checkpoint'] or '-'}")
    print("values:" if data["values"] else "values: -")
    for key, value in sorted(data["values"].items()):
        print(f"  {key:<30} {_fmt(value)}")
    print("artifacts:" if data["artifacts"] else "artifacts: -")
    for name, meta in sorted(data["artifacts"].items()):
        print(f"  {name:<30} {meta['filename']} ({meta['size']} bytes)")
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    """Write an artifact's exact bytes to a file (atomically) or stdout."""
    with Store(args.store) as store:
        payload = store.artifact(args.node, args.name, version=args.version)
    content = payload["content"]
    if not args.output:
        sys.stdout.buffer.write(content)
        sys.stdout.buffer.flush()
        return 0
    out = Path(args.output)
    if out.is_dir():
        out = out / payload["filename"]
    fd, tmp = tempfile.mkstemp(dir=out.parent if str(out.parent) else ".", prefix=f".{out.name}.")
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
    os.replace(tmp, out)
    print(f"wrote {out} ({len(content)} bytes)", file=sys.stderr)
    return 0
