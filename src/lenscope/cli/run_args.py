"""The `run` subcommand's arguments; the command itself (cli/run.py) loads JAX, so it is imported when run."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..job_registry import check_job_name


def add_parser(sub: argparse._SubParsersAction, make: Callable[..., argparse.ArgumentParser], job_help: str) -> None:
    """The `run` subparser (`make(sub, name, help, description)` adds the shared options)."""
    run = make(sub, "run", "run a job; prints `node <address>` last",
               "Run a job (construct, setup, run, cleanup) and print `node <address>` (its final node) last. "
               "Config sources merge in order: defaults < YAML files < key=value overrides. Ctrl-C or SIGTERM "
               "stops it at a safe point, marks its node failed (interrupted), says how to resume, exits 130.")
    run.add_argument("job", help=job_help)
    run.add_argument("sources", nargs="*", metavar="CONFIG.yaml|key=value",
                     help="YAML files, then overrides like training/steps=100 (or training.steps=100)")
    run.add_argument("--base", metavar="NODE", help="start from this node's checkpoint: resume it, or --branch")
    run.add_argument("--branch", action="store_true", help="start a new lineage whose parent is --base")
    run.add_argument("--resume", action="store_true",
                     help="resume the latest interrupted, failed or stale run of JOB with this config "
                          "from its last checkpoint")
    run.add_argument("--analysis", action="append", default=[], metavar="NAME",
                     help="run these registered analyses on the job's state instead of run() (no training)")
    run.add_argument("--tandem", action="append", default=[], metavar="NAME[,key=value,...]",
                     help="run this registered analysis in tandem with training, at every validation "
                          "(sets training/analyses; repeat for several)")
    run.add_argument("--distributed", action="store_true",
                     help="first join this host's peers with jax.distributed.initialize() (cluster found from "
                          "SLURM, Cloud TPU, Kubernetes or MPI; docs/scale.md): one such command per host")
    run.set_defaults(handler=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    """Run a job: imports the run command, which loads JAX and the model libraries, only when it is needed."""
    check_job_name(args.job)  # a typo is refused before JAX loads
    from . import run  # lazy: training and analysis load JAX; ls/show/get/fsck/ui start without them

    return run.cmd_run(args)
