"""The `lenscope` command: run, configure, jobs, ls, show, get (behaviour lives in commands.py)."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import NoReturn

from ..version import VERSION
from . import commands, diff, export, maintenance, report, run_args, serve, sweep_args
from .compile_report import compile_report

_JOB_HELP = "registered job name (see `lenscope jobs`), package.module:Class or path/to/file.py:Class"
_NODE_HELP = "node address NAME@NONCE:SEQ, e.g. grokking.train@7f3a2c:12"
EXIT_INTERRUPTED = 130
_SHIELD = " "  # argparse never reads an argument containing a space as an option
_EPILOG = ("Exit codes: 0 ok; 2 your input or your code (arguments, config, files, a job or analysis that raised); "
           "1 lenscope's own failure; 130 interrupted. Errors are one line; --debug shows tracebacks.")


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line that points at --help."""

    def error(self, message: str):  # noqa: D102 (argparse's hook)
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _options(parser: argparse.ArgumentParser, top: bool) -> None:
    """--store and --debug, accepted before or after the subcommand (the subcommand's copy never resets them)."""
    keep = {} if top else {"default": argparse.SUPPRESS}
    parser.add_argument("--store", metavar="URL", help="store URL or folder (default $LENSCOPE_STORE, else ./runs)",
                        **keep)
    parser.add_argument("--debug", action="store_true",
                        help="show full tracebacks on errors, and each compiled program's time", **keep)


def _sub(sub: argparse._SubParsersAction, name: str, help: str, description: str) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help, description=description, epilog=_EPILOG)
    _options(parser, top=False)
    parser.set_defaults(subparser=parser)  # lets parse() report leftovers with this subcommand's name
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `lenscope` command (one subparser per subcommand)."""
    parser = _Parser(prog="lenscope", description="Train, analyze and look up JAX runs.",
                                     epilog=_EPILOG)
    parser.add_argument("--version", action="version", version=f"lenscope {VERSION}")
    _options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run_args.add_parser(sub, _sub, _JOB_HELP)

    configure = _sub(sub, "configure", "print a job's complete config as commented YAML",
                     "Print the job's complete config (defaults, with the given sources applied) as YAML with "
                     "each field's help as a comment. Feeding the file back to run or configure changes nothing.")
    configure.add_argument("job", help=_JOB_HELP)
    configure.add_argument("sources", nargs="*", metavar="CONFIG.yaml|key=value", help="YAML files, then overrides")

    _sub(sub, "jobs", "list registered jobs", "List registered jobs with their one-line description.")

    ls = _sub(sub, "ls", "list runs, nodes or artifacts matching filters",
              "List runs (one row per lineage: its latest node, status, steps and main values); with --nodes or "
              "any node filter, nodes, or with --artifact their artifacts, matching every filter given. "
              "Repeated --name/--nonce/--status values are alternatives.")
    ls.add_argument("--name", action="append", metavar="JOB",
                    help="job or node name (grokking/train or grokking.train)")
    ls.add_argument("--nonce", action="append", metavar="NONCE", help="lineage nonce (6 hex digits)")
    ls.add_argument("--status", action="append", metavar="STATUS", help="running, done or failed")
    ls.add_argument("--lineage", metavar="NODE", help="the nodes of this node's lineage, by seq")
    ls.add_argument("--seq", type=int, action="append", metavar="N", help="only this seq number")
    ls.add_argument("--checkpoint", action="store_true", help="only nodes with a checkpoint (adds its path)")
    ls.add_argument("--artifact", nargs="?", const="", metavar="NAME", help="list artifacts (only NAME if given)")
    ls.add_argument("--where", nargs=3, action="append", default=[], metavar=("KEY", "OP", "VALUE"),
                    help="value or column condition; OP is one of == != < <= > >= in like; VALUE is read "
                         "as config overrides are (3, 1e-3, true, null, [1, 2]), else taken as text")
    ls.add_argument("--sort", action="append", metavar="KEY", help="order by KEY (repeat to break ties)")
    ls.add_argument("--desc", action="store_true", help="sort descending")
    ls.add_argument("--limit", type=int, metavar="N", help="at most N rows")
    ls.add_argument("--latest", action="store_true", help="only the row with the highest seq")
    ls.add_argument("--keys", metavar="K1,K2", help="value keys to show (default: the most common few)")
    ls.add_argument("--nodes", action="store_true",
                    help="one row per node (implied by --lineage/--seq/--checkpoint/--artifact/--where/--sort/"
                         "--latest/--keys); default: one row per run (lineage)")
    out = ls.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print rows as a JSON list")
    out.add_argument("-q", "--quiet", action="store_true", help="print node addresses only, one a line")

    show = _sub(sub, "show", "show one node: status, values, artifacts, checkpoint, config",
                "Show one node: status, lineage, values, artifacts, checkpoint and config.")
    show.add_argument("node", help=_NODE_HELP)
    show.add_argument("--json", action="store_true", help="print as a JSON object")

    get = _sub(sub, "get", "write an artifact's exact bytes (to stdout or -o FILE)",
               "Write the exact bytes of a node's artifact to FILE (atomically) or to stdout.")
    get.add_argument("node", help=_NODE_HELP)
    get.add_argument("name", help="artifact name (`lenscope show NODE` lists them)")
    get.add_argument("-o", "--output", metavar="FILE",
                     help="file to write, or DIR/ (or an existing folder) to write into under the artifact's "
                          "filename; '-' or none: stdout. Links, FIFOs and devices are refused")
    get.add_argument("--version", type=int, metavar="N", help="an older version (default: the latest)")
    diff.add_parser(sub, _sub)
    export.add_parser(sub, _sub)
    sweep_args.add_parser(sub, _sub, _JOB_HELP)
    maintenance.add_parsers(sub, _sub)
    serve.add_parser(sub, _sub)
    return parser


def entry() -> NoReturn:
    """The `lenscope` process: main(), then exit with its code without tearing the interpreter down.

    By the time main() returns every write is complete (stores commit per write, files are written to a
    temporary name, closed and renamed), so what is left is what a normal exit would do first, done here:
    join the threads that are not daemons and run the atexit handlers. Skipped is only the interpreter's
    teardown, unloading some thousands of modules one by one, which costs a warm analysis about a tenth of
    its CPU time (docs/training.md).
    """
    code = main()
    # What Py_Finalize does first: threading's exit hooks, which stop the idle workers of executors never shut down
    # (a library's, after a failed write), then a join of every non-daemon thread; joining without the hooks would
    # wait on such a worker forever.
    threading._shutdown()
    atexit._run_exitfuncs()  # what Py_Finalize runs next; the only stdlib way to run them and then os._exit
    _leave(code)


def _leave(code: int) -> NoReturn:
    """Exit the process at once with `code`: at the end of a command (entry) and after an interrupt.

    After an interrupt, the job's writes are complete or abandoned, but work may still run in the background
    (a compile ahead, a figure being drawn, XLA's own threads): shutting the interpreter down around a
    thread in native code can abort the process (SIGABRT) instead of exiting with `code`.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a reader that left (`| head`) is not an error
            stream.flush()
    os._exit(code)


def _shield_where_values(argv: list[str]) -> list[str]:
    """argv with each --where VALUE that starts with '-' (-1e-3, -.inf) shielded from being taken for an option."""
    out = list(argv)
    for i in range(len(out) - 3):
        if out[i] == "--where" and out[i + 3].startswith("-"):
            out[i + 3] = _SHIELD + out[i + 3]
    return out


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parsed arguments; config sources may come before, between or after the options of any subcommand that takes
    them (run, configure, sweep)."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args, extra = parser.parse_known_args(_shield_where_values(argv))
    if args.command == "ls":
        args.where = [(key, op, value.removeprefix(_SHIELD)) for key, op, value in args.where]
    if hasattr(args, "sources"):  # every subcommand that takes config sources: run, configure, sweep
        args.sources += [item for item in extra if not item.startswith("-")]
        extra = [item for item in extra if item.startswith("-")]
    if extra:
        args.subparser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `lenscope` command; returns the exit code."""
    args = parse(argv)
    try:
        handler = getattr(args, "handler", None) or getattr(commands, f"cmd_{args.command}")
        if args.debug:  # where the wait for a first answer goes: each program's trace, lower and compile time
            with compile_report(lambda line: print(line, file=sys.stderr, flush=True)):
                return handler(args)
        return handler(args)
    except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM; a job's notes say what became of its node
        said = "; ".join([str(err) or "interrupted", *getattr(err, "__notes__", ())])
        print(f"lenscope: {said}", file=sys.stderr, flush=True)
        _leave(EXIT_INTERRUPTED)
    except BrokenPipeError:  # e.g. `lenscope ls | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as err:  # the exit-code rule: cli/report.py and docs/cli.md
        if args.debug:
            traceback.print_exc()
        else:
            print(f"lenscope: error: {report.message(err)}", file=sys.stderr)
        return report.exit_code(err)

