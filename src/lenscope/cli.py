"""The `lenscope` command: run, configure, jobs, ls, show, get."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from .errors import LenscopeError, UsageError
from .registry import jobs, resolve


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", metavar="URL", help="store URL or folder (default $LENSCOPE_STORE, else ./runs)")
    common.add_argument("--debug", action="store_true", help="show tracebacks")
    parser = argparse.ArgumentParser(prog="lenscope", description="Train, analyze and look up JAX runs.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", parents=[common], help="run a job; prints `node <address>` last",
                         description="Run a job: construct, setup, run, cleanup. Prints `node <address>` last.")
    run.add_argument("job", help="registered job name, package.module:Class or path/to/file.py:Class")
    run.add_argument("sources", nargs="*", metavar="CONFIG.yaml|key=value", help="YAML files, then overrides")
    run.add_argument("--base", metavar="NODE", help="restore this node's checkpoint (resume it, or branch)")
    run.add_argument("--branch", action="store_true", help="start a new lineage whose parent is --base")
    run.add_argument("--analysis", action="append", default=[], metavar="NAME",
                     help="run these registered analyses on the job's state instead of run()")

    configure = sub.add_parser("configure", parents=[common], help="print the job's full config as YAML")
    configure.add_argument("job")
    configure.add_argument("sources", nargs="*", metavar="CONFIG.yaml|key=value")

    sub.add_parser("jobs", parents=[common], help="list registered jobs")

    ls = sub.add_parser("ls", parents=[common], help="list nodes (or artifacts) matching filters")
    ls.add_argument("--name")
    ls.add_argument("--nonce")
    ls.add_argument("--lineage", metavar="NODE", help="nodes of this node's lineage (same name and nonce)")
    ls.add_argument("--seq", type=int)
    ls.add_argument("--checkpoint", action="store_true", help="only nodes with a checkpoint")
    ls.add_argument("--artifact", nargs="?", const="", metavar="NAME", help="list artifacts (of NAME) instead of nodes")
    ls.add_argument("--where", nargs=3, action="append", default=[], metavar=("KEY", "OP", "VALUE"))
    ls.add_argument("--sort", metavar="KEY")
    ls.add_argument("--desc", action="store_true", help="sort descending")
    ls.add_argument("--limit", type=int)
    ls.add_argument("--json", action="store_true", help="machine-readable output")

    show = sub.add_parser("show", parents=[common], help="show one node: status, values, artifacts, checkpoint")
    show.add_argument("node")
    show.add_argument("--json", action="store_true", help="machine-readable output")

    get = sub.add_parser("get", parents=[common], help="write an artifact's exact bytes")
    get.add_argument("node")
    get.add_argument("name")
    get.add_argument("-o", "--output", metavar="FILE", help="file to write (default: stdout)")
    get.add_argument("--version", type=int, help="an older version (default: latest)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `lenscope` command; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        from . import cli_commands

        return getattr(cli_commands, f"cmd_{args.command}")(args)
    except LenscopeError as err:
        if args.debug:
            raise
        print(f"lenscope: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("lenscope: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # a job's own failure: one line unless --debug
        if args.debug:
            raise
        print(f"lenscope: error: {type(err).__name__}: {err} (rerun with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
