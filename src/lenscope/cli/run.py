"""`lenscope run`: run a job (or analyses on its state), resume the latest interrupted run, say how to resume one."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax

from ..analysis import AnalysisBase
from ..analysis.base import refuse_branch
from ..config import hydrate
from ..errors import UsageError
from ..job_registry import resolve
from ..runner import build_job, run_analyses, run_job
from ..store import Node
from ..store.lineage_heads import heads
from ..text import parse_value
from ..training.interrupts import on_signals
from ..training.resume import resume_point
from .commands import _lookup, open_store
from .hints import lineage_keys


def cmd_run(args: argparse.Namespace) -> int:
    """Run a job (or analyses on its state) and print `node <address>` last (after one line per other model a job
    trained); SIGINT/SIGTERM stop it cleanly."""
    with on_signals():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    _check_flags(args)
    if args.branch and issubclass(resolve(args.job), AnalysisBase):  # before the store is opened: nothing written
        raise UsageError(refuse_branch(args.job, args.base))
    if args.distributed:
        _join_cluster()
    base, saved = args.base, None
    if args.resume:
        base = _resume_base(args)
    elif args.base:
        with open_store(args.store) as store:
            _lookup(store, args.base, store.status)
            saved = store.config(Node.parse(args.base)) if args.analysis else None
    if args.analysis:
        _check_ignored(args, saved)
    instance = build_job(args.job, args.sources, base=base, store=args.store)
    try:
        node = run_analyses(instance, args.analysis) if args.analysis else run_job(instance, branch=args.branch)
    except BaseException as err:
        for note in _outcome(args, instance, err):
            err.add_note(note)
        raise
    for other in getattr(instance, "also_trained", ()):  # a multi-model job: each other model's node, then the main
        print(f"node {other}", flush=True)
    print(f"node {node}", flush=True)
    _say_next(args, instance, node)
    return 0


def _say_next(args: argparse.Namespace, instance: Any, node: Any) -> None:
    """Where the results are and the commands that look at them, on stderr (stdout's last line stays the node)."""
    store = shlex.join(["--store", args.store]) + " " if args.store else ""
    results = Path(getattr(instance.args, "results", ".")) / node.name / node.nonce
    lines = [f"lenscope: finished {node}"]
    if results.is_dir():
        lines.append(f"  results  {results}/<step>/  (figures and JSON of each analysed step)")
    keys = lineage_keys(instance.store, node) if getattr(instance, "store", None) is not None else []
    listing = f"lenscope {store}ls --lineage {node}" + (f" --keys {','.join(keys)}" if keys else "")
    lines.append(f"  look     lenscope {store}show {node}    {listing}")
    lines.append(f"  browse   lenscope {store}ui    then open http://127.0.0.1:8765 (curves, figures over the steps)")
    print("\n".join(lines), file=sys.stderr, flush=True)


def _join_cluster() -> None:
    """jax.distributed.initialize() with no arguments: JAX finds the cluster; a clear error when there is none."""
    try:
        jax.distributed.initialize()
    except (ValueError, RuntimeError) as err:
        raise UsageError(f"--distributed: jax.distributed.initialize() found no cluster to join ({err}); run one "
                         "command per host under SLURM, on Cloud TPU, or in a Kubernetes/MPI job, or set "
                         "JAX_COORDINATOR_ADDRESS and call jax.distributed.initialize(...) with num_processes and "
                         "process_id from a script (docs/scale.md)") from err


# Config paths only training reads: `--analysis` (analyses instead of training) would ignore them.
TRAINING_ONLY = ("training/steps", "training/analyses", "training/analyze", "training/remat", "optimization/",
                 "logging/report_interval", "logging/validation_interval", "logging/analysis_interval",
                 "logging/checkpoint_interval")


def _check_flags(args: argparse.Namespace) -> None:
    _check_tandem(args)
    if args.branch and not args.base:
        raise UsageError("--branch needs --base NODE (the node to branch from)")
    if args.branch and args.analysis:
        raise UsageError("--branch starts a new training lineage, but --analysis attaches its results to the node it "
                         "analyzes (--base NODE) and never branches; drop --branch, or branch the training run first "
                         "and analyze its node")
    if args.resume and args.analysis:
        raise UsageError("--resume finds the node to resume itself; it cannot be combined with --analysis "
                         "(to resume a node of your choice: --base NODE)")


def _overrides(sources: list) -> list[tuple[str, str]]:
    """(config path, value text) of the key=value overrides among `sources` (a.b=c spelled a/b)."""
    pairs = [s.partition("=") for s in sources if isinstance(s, str) and "=" in s and not s.endswith((".yaml", ".yml"))]
    return [(key.strip().replace(".", "/"), value) for key, _, value in pairs]


def _check_tandem(args: argparse.Namespace) -> None:
    """Refuse `--tandem` beside `--analysis` or a training/analyses override; then it becomes that source."""
    if not args.tandem:
        return
    if args.analysis:
        raise UsageError("--analysis runs analyses instead of training, --tandem runs them while training; "
                         "give one (--tandem NAME to train and analyse at every validation)")
    if any(path == "training/analyses" for path, _ in _overrides(args.sources)):
        raise UsageError("--tandem sets training/analyses, which an override sets too; give the analyses one way")
    args.sources = [*args.sources, "training/analyses=" + json.dumps(list(args.tandem))]


def _check_ignored(args: argparse.Namespace, saved: Mapping[str, Any] | None) -> None:
    """Refuse `--analysis` with overrides only training reads, unless they restate the `--base` node's config."""
    given = dict(_overrides(args.sources))  # the last override of a path is the one that holds
    ignored = [path for path, value in given.items() if path.startswith(TRAINING_ONLY)
               and (saved is None or _saved(saved, path) != parse_value(value))]
    if ignored:
        command = shlex.join(["lenscope", "run", args.job, *args.sources, "--tandem", args.analysis[0]])
        raise UsageError(f"--analysis runs analyses on the job's state instead of training, so it would ignore "
                         f"{', '.join(ignored)}; to train and run them at every validation use --tandem NAME "
                         f"(e.g. {command})")


def _saved(config: Mapping[str, Any], path: str) -> Any:
    """The value at `path` of a node's saved (nested) config, or a marker that it has none."""
    node: Any = config
    for part in path.split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


_MISSING = object()


def _resume_base(args: argparse.Namespace) -> str:
    """The checkpoint node `--resume` continues from; says on stderr which run it resumes."""
    cls = resolve(args.job)
    where = args.store or hydrate(cls.CONFIG, *args.sources).store_url
    with open_store(where) as store:
        sources = [*args.sources, *(_base_as_config(cls, store, args) if args.base else [])]
        point = resume_point(cls, sources, store, job=args.job)
    print(f"lenscope: resuming {point.head.node} ({point.state}) from its checkpoint {point.checkpoint}",
          file=sys.stderr, flush=True)
    return str(point.checkpoint)


def _outcome(args: argparse.Namespace, instance: Any, err: BaseException) -> list[str]:
    """What a failed run did to its node, said only when it was written, and for an interrupt how to resume it."""
    lineage = getattr(instance, "lineage", None)
    if lineage is None:
        return []
    notes = []
    if lineage.ended is not None and lineage.ended[0] == "failed":
        notes.append(f"node {lineage.node} marked failed ({lineage.ended[1]})"
                     if lineage.ended[1] == "interrupted" else f"node {lineage.node} marked failed")
    unfinished = lineage.ended is None or lineage.ended[0] == "failed"  # not a run interrupted in its cleanup
    if isinstance(err, KeyboardInterrupt) and unfinished and lineage.owner and not args.analysis \
            and not isinstance(instance, AnalysisBase):
        notes.append(_how_to_resume(args, instance))
    return notes


def _how_to_resume(args: argparse.Namespace, instance: Any) -> str:
    """The exact command that resumes this run: `--resume` when it finds this lineage, else `--base CHECKPOINT`."""
    store = ["--store", args.store] if args.store else []
    lineage = instance.lineage.node.lineage
    try:
        given = _base_as_config(type(instance), instance.store, args) if args.base else []
        base = ["--base", args.base] if given else []
        if resume_point(type(instance), [*args.sources, *given], instance.store,
                        job=args.job).head.node.lineage == lineage:
            return "resume it with: " + shlex.join(["lenscope", "run", args.job, *args.sources, "--resume", *base,
                                                    *store])
    except UsageError:
        pass
    mine = [h for h in heads(instance.store, instance.name) if h.node.lineage == lineage]
    if not mine or mine[0].checkpoint is None:
        return "it wrote no checkpoint: run it again to start over"
    checkpoint = str(mine[0].checkpoint)
    return "resume it with: " + shlex.join(["lenscope", "run", args.job, *args.sources, "--base", checkpoint, *store])


def _base_as_config(cls: type, store: Any, args: argparse.Namespace) -> list[str]:
    """`--resume --base MODEL` of a job whose base is its input (an SAE's model): the overrides that say so."""
    _lookup(store, args.base, store.status)
    given = cls.base_as_config(store, args.base) if hasattr(cls, "base_as_config") else None
    if given is None:
        raise UsageError(f"--resume finds the node to resume itself; with {args.job}, --base names the state to go "
                         f"on from, so the two cannot be combined (to resume {args.base} itself: --base "
                         f"{args.base} without --resume)")
    return given
