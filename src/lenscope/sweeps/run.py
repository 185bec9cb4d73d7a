"""Running a sweep's trials: each one a lenscope run of the job, reported to Optuna at validation cadence (E1)."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..runner import build_job, run_job
from ..store import Node, Store
from ..store.lineage_heads import values_up_to
from ..training.loop import StopTraining
from .study import SweepSpec, budget_lock, heartbeat_s, optuna


@dataclass(frozen=True)
class Outcome:
    """One finished trial: its number, drawn params, final node, state and objective value."""

    number: int
    params: dict[str, Any]
    node: Node
    state: str  # "complete", "pruned" or "failed" (no objective value)
    value: float | None


class _Pruning:
    """A validation watcher: reports the objective to the trial and stops training when Optuna prunes it."""

    def __init__(self, trial: Any, key: str) -> None:
        self.trial, self.key = trial, key

    def __call__(self, step: int, values: Mapping[str, float]) -> None:
        if self.key not in values:
            return
        self.trial.report(float(values[self.key]), step)
        if self.trial.should_prune():
            raise StopTraining(f"pruned at step {step}")


def budget(spec: SweepSpec) -> int:
    """How many trials the sweep runs in all: --trials, at most the grid's size for a grid search."""
    if spec.sampler != "grid":
        return spec.trials
    size = 1
    for param in spec.parsed():
        size *= len(param.grid())
    return min(spec.trials, size)


def _describe(values: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())


def trial_objective(store: Store, spec: SweepSpec, study_name: str, done: list[Outcome],
                    say: Callable[[str], None]) -> Callable[[Any], float]:
    """The function Optuna optimizes: draw params, run the job on them, record the trial on its final node."""
    module = optuna()
    params, key = spec.parsed(), spec.key

    def objective(trial: Any) -> float:
        drawn = {p.path: p.suggest(trial) for p in params}
        instance = build_job(spec.job, [*spec.sources, drawn], store=store)
        instance.watch_validation(_Pruning(trial, key))
        try:
            node = run_job(instance)
        except BaseException as err:
            _note_failure(trial, instance, f"{type(err).__name__}: {err}" if str(err) else type(err).__name__)
            raise
        trial.set_user_attr("node", str(node))
        value = values_up_to(store, node).get(key)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        failure = None
        if not instance.stopped and not number:
            recorded = ", ".join(sorted(values_up_to(store, node))) or "none"
            failure = (f"--objective {spec.objective}: trial {trial.number} (node {node}) recorded no number "
                       f"under {key!r}; its value keys: {recorded}")
        state = "pruned" if instance.stopped else "failed" if failure else "complete"
        store.record(node, {"sweep/study": study_name, "sweep/trial": trial.number, "sweep/state": state,
                            "sweep/worker": f"{socket.gethostname()}:{os.getpid()}",
                            "sweep/objective": value if number else None,
                            **({"sweep/error": failure} if failure else {})})
        done.append(Outcome(trial.number, drawn, node, state, value))
        shown = f"{key} {value:.6g}" if number else f"no {key}"
        say(f"trial {trial.number} {state}: {_describe(drawn)} -> {shown} ({instance.stopped or 'ran to the end'}) "
            f"node {node}")
        if instance.stopped:
            raise module.TrialPruned(instance.stopped)
        if failure:
            trial.set_user_attr("error", failure)
            raise UsageError(failure)
        return float(value)

    return objective


def _note_failure(trial: Any, instance: Any, reason: str) -> None:
    """Keep why a trial's job raised (and its node, when it got one) on the Optuna trial, which records no reason."""
    lineage = getattr(instance, "lineage", None)
    with contextlib.suppress(Exception):  # the job's own error is the one to raise
        if lineage is not None:
            trial.set_user_attr("node", str(lineage.node))
        trial.set_user_attr("error", reason[:2000])


def run_trials(store: Store, study: Any, spec: SweepSpec, say: Callable[[str], None] | None = None) -> list[Outcome]:
    """Run trials of `study` until it holds its budget of trials (counting other workers'); this worker's outcomes."""
    say = say or (lambda text: print(f"lenscope sweep: {text}", file=sys.stderr, flush=True))
    done: list[Outcome] = []
    objective = trial_objective(store, spec, study.study_name, done, say)
    total = budget(spec)
    while True:
        with contextlib.ExitStack() as held:  # the budget lock, from the count until the new trial is RUNNING
            held.enter_context(budget_lock(store))
            counted, running = _tally(study)
            if counted < total:
                study.optimize(_once_begun(objective, held.close), n_trials=1)
                continue
        if running:  # another worker's trial: wait for it to finish, or to go silent and be queued again
            time.sleep(heartbeat_s())
        else:
            return done


def _once_begun(objective: Callable[[Any], float], release: Callable[[], None]) -> Callable[[Any], float]:
    """`objective`, calling `release` first: Optuna has made the trial RUNNING by then, so other workers count it."""
    def run(trial: Any) -> float:
        release()
        return objective(trial)
    return run


def _tally(study: Any) -> tuple[int, int]:
    """(trials counted toward the budget, of them still running), after failing the trials of dead workers.

    A trial whose worker died (no heartbeat for the grace period) is failed and queued again with its params;
    the failed one then no longer counts, its queued copy does once it begins (WAITING trials are still to run)."""
    module = optuna()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", module.exceptions.ExperimentalWarning)
        module.storages.fail_stale_trials(study)
        trials = study.get_trials(deepcopy=False)
        retried = {module.storages.RetryFailedTrialCallback.retried_trial_number(t) for t in trials}
    state = module.trial.TrialState
    begun = [t for t in trials if t.state in (state.RUNNING, state.COMPLETE, state.PRUNED, state.FAIL)
             and t.number not in retried]
    return len(begun), sum(t.state == state.RUNNING for t in begun)


def best(study: Any) -> tuple[int, float, str] | None:
    """(trial number, value, node) of the study's best completed trial, or None when none completed."""
    module = optuna()
    complete = study.get_trials(deepcopy=False, states=(module.trial.TrialState.COMPLETE,))
    if not complete:
        return None
    trial = study.best_trial
    return trial.number, trial.value, trial.user_attrs.get("node", "")
