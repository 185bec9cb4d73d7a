"""`lenscope sweep`: create a study (or join one) and run its trials; prints the best trial's node last."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from ..errors import UsageError
from ..job_registry import resolve
from ..store import Store
from ..sweeps import SweepSpec, best, create, load, parse_objective, parse_param, run_trials
from ..sweeps.params import check_params
from ..sweeps.study import check_choices
from ..training.interrupts import on_signals


def _spec(args: argparse.Namespace) -> SweepSpec:
    """The sweep the arguments describe, checked against the job's config before anything is written."""
    if not args.job:
        raise UsageError("lenscope sweep needs a JOB (or --join STUDY to join a running sweep)")
    if not args.param:
        raise UsageError("lenscope sweep needs at least one --param PATH=KIND:ARGS, "
                         "e.g. --param optimization/lr=loguniform:1e-4:1e-2")
    if not args.objective:
        raise UsageError("lenscope sweep needs --objective KEY:max|min, e.g. --objective val/accuracy:max")
    parse_objective(args.objective)
    spec = SweepSpec(job=_absolute(args.job), sources=[_absolute(s) for s in args.sources],
                     params=list(args.param), objective=args.objective,
                     sampler=args.sampler, pruner=args.pruner, trials=10 if args.trials is None else args.trials,
                     seed=args.seed)
    check_choices(spec)
    params = [parse_param(text) for text in spec.params]
    check_params(resolve(spec.job).CONFIG, spec.sources, params)
    if spec.sampler == "grid":
        for param in params:
            param.grid()
    return spec


def _absolute(text: str) -> str:
    """A job file or YAML source with its path made absolute, so workers started elsewhere find the same file."""
    path, colon, attr = text.rpartition(":") if ".py:" in text else (text, "", "")
    if path.endswith((".py", ".yaml", ".yml")) and "=" not in path and Path(path).is_file():
        return str(Path(path).resolve()) + colon + attr
    return text


def _workers(args: argparse.Namespace, study: str, store_url: str) -> list[subprocess.Popen]:
    """K-1 subprocesses joining `study`, each a `lenscope sweep --join` on the same store."""
    command = [sys.executable, "-m", "lenscope", "sweep", "--join", study, "--store", store_url]
    return [subprocess.Popen(command) for _ in range(args.workers - 1)]


def cmd_sweep(args: argparse.Namespace) -> int:
    """Create or join a study, run trials until it holds its budget, print the best trial."""
    if args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    if args.join and (args.job or args.param or args.objective or args.study):
        raise UsageError("--join STUDY takes the job, params and objective from the study; "
                         "give only --join (and --store, --trials, --workers)")
    spec = None if args.join else _spec(args)  # checked before the store is opened: bad input writes nothing
    with on_signals(), Store(args.store) as store:
        if spec is None:
            study, spec = load(store, args.join)
        else:
            study = create(store, spec, args.study)
        print(f"lenscope sweep: study {study.study_name} ({spec.sampler}, {spec.objective}); join it with: "
              f"lenscope sweep --join {study.study_name} --store {store.url}", file=sys.stderr, flush=True)
        workers = _workers(args, study.study_name, store.url)
        try:
            run_trials(store, study, spec)
        finally:
            codes = [worker.wait() for worker in workers]
        failed = [code for code in codes if code != 0]
        if failed:
            raise UsageError(f"{len(failed)} of {len(workers)} joining workers failed (exit codes "
                             f"{', '.join(map(str, failed))}); their errors are above")
        top = best(study)
    print(f"study {study.study_name}")
    if top is None:
        print("lenscope sweep: no trial completed (all pruned or still running elsewhere)", file=sys.stderr)
        return 0
    number, value, node = top
    print(f"best trial {number}: {spec.key} {value:.6g}")
    print(f"node {node}")
    return 0
