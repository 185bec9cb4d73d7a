"""The `sweep` subcommand's arguments; the command itself (cli/sweep.py) loads JAX and Optuna, so it is imported
when run."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def add_parser(sub: argparse._SubParsersAction, make: Callable[..., argparse.ArgumentParser], job_help: str) -> None:
    """The `sweep` subparser (`make(sub, name, help, description)` adds the shared options)."""
    sweep = make(sub, "sweep", "search a job's config with Optuna; each trial is a lenscope run",
                 "Run trials of JOB with config values drawn by Optuna (TPE, random or grid), each trial a lenscope "
                 "run whose final node records sweep/study, sweep/trial, sweep/state and sweep/objective. Hopeless "
                 "trials are pruned at validation cadence. The study lives beside the store (in the same "
                 "PostgreSQL database, or optuna.db in a store folder), so workers elsewhere join it with --join.")
    sweep.add_argument("job", nargs="?", help=job_help + " (not with --join)")
    sweep.add_argument("sources", nargs="*", metavar="CONFIG.yaml|key=value",
                       help="YAML files, then overrides applied to every trial")
    sweep.add_argument("--param", action="append", default=[], metavar="PATH=KIND:ARGS",
                       help="a searched config key: PATH=uniform:LOW:HIGH, loguniform:LOW:HIGH, int:LOW:HIGH[:STEP], "
                            "logint:LOW:HIGH or choice:A,B,C (repeatable)")
    sweep.add_argument("--objective", metavar="KEY:max|min", help="the value key to optimize, e.g. val/accuracy:max")
    sweep.add_argument("--trials", type=int, metavar="N", help="trials in all, over every worker (default 10; "
                       "a grid search stops at the grid's size)")
    sweep.add_argument("--sampler", default="tpe", metavar="NAME", help="tpe (default), random or grid")
    sweep.add_argument("--pruner", default="median", metavar="NAME", help="median (default), hyperband or none")
    sweep.add_argument("--seed", type=int, metavar="S", help="the sampler's seed (this process's draws)")
    sweep.add_argument("--study", metavar="NAME", help="name of the new study (default <job>-<6 hex>)")
    sweep.add_argument("--join", metavar="STUDY", help="join this study (its job, params and objective) as a worker")
    sweep.add_argument("--workers", type=int, default=1, metavar="K",
                       help="run K workers on this machine (this process and K-1 joining subprocesses)")
    sweep.set_defaults(handler=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run a sweep: imports the sweep command, which loads JAX and Optuna, only when it is needed."""
    from . import sweep  # lazy: trials load JAX; ls/show/get/fsck/ui start without them

    return sweep.cmd_sweep(args)
