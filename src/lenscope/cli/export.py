"""`lenscope export RUN ... --to tensorboard DIR | --to mlflow URI | --to hf DIR`: a run in the tools researchers
already use, or a language model's checkpoint as a Hugging Face folder."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from ..errors import UsageError, hint
from .commands import open_store
from .diff import resolve_run

TOOLS = ("tensorboard", "mlflow", "hf")


def add_parser(sub: argparse._SubParsersAction, make: Callable[..., argparse.ArgumentParser]) -> None:
    """The `export` subparser (`make(sub, name, help, description)` adds the shared options)."""
    export = make(sub, "export", "export runs to TensorBoard or MLflow, or a language model to a Hugging Face folder",
                  "Export each RUN (its lineage up to that node): to TensorBoard as an event file under "
                  "DIR/NAME@NONCE (values as scalars by step, figures as images, the config as text), or to "
                  "MLflow as one run per RUN (config as params, values as metrics by step, artifacts). "
                  "`--to hf DIR`: one language model's checkpoint node as a Hugging Face folder "
                  "(config.json, model.safetensors, tokenizer) that transformers reads.")
    export.add_argument("runs", nargs="+", metavar="RUN", help="a node NAME@NONCE:SEQ, or a run NAME@NONCE")
    export.add_argument("--to", nargs=2, required=True, metavar=("TOOL", "WHERE"),
                        help="tensorboard DIR, mlflow TRACKING_URI (e.g. sqlite:///mlflow.db, http://host:5000), "
                             "or hf DIR (a new folder)")
    export.add_argument("--job", metavar="JOB", help="with --to hf: the job that trained the node, when it is not a "
                                                     "registered one (module:Class or path/to/file.py:Class)")
    export.add_argument("--experiment", default="lenscope", metavar="NAME", help="MLflow experiment (default lenscope)")
    export.set_defaults(handler=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    """Export each run; prints one line per run: where it went."""
    tool, where = args.to
    if tool not in TOOLS:
        raise UsageError(f"unknown --to {tool!r}{hint(tool, TOOLS)}; expected tensorboard DIR, mlflow URI or hf DIR")
    if tool == "hf":
        return _export_hf(args, where)
    # lazy: the exporters load only for `lenscope export`
    from ..exports import read_run, to_mlflow, to_tensorboard
    with open_store(args.store) as store:
        runs = [read_run(store, resolve_run(store, text)) for text in args.runs]  # every RUN checked first
    for run in runs:
        if tool == "tensorboard":
            print(f"{run.node} -> {to_tensorboard(run, where)}")
        else:
            print(f"{run.node} -> mlflow run {to_mlflow(run, where, args.experiment)} ({where})")
        sys.stdout.flush()
    return 0


def _export_hf(args: argparse.Namespace, where: str) -> int:
    """One checkpoint node as a Hugging Face folder; prints where it went."""
    if len(args.runs) != 1:
        raise UsageError(f"--to hf exports one node, got {len(args.runs)}: {' '.join(args.runs)}")
    from ..exports.hf import to_hf  # lazy: JAX and the model load only for this export
    with open_store(args.store) as store:
        node = resolve_run(store, args.runs[0])
        print(f"{node} -> {to_hf(store, node, where, args.job)}")
    return 0
