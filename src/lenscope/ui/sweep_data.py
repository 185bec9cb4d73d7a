"""A sweep as the UI shows it: its Optuna study opened read-only, each trial's true state, params, value and run.

Optuna's storage is the truth about a trial's state: a pruned trial's run ends `done` in the lineage store, and
so does a trial whose run finished but recorded no objective value (Optuna failed it). The lineage store adds
why a trial failed when Optuna did not keep it (`sweep/error`, the node's error).
"""

from __future__ import annotations

import json
import math
import threading
import warnings
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

from sqlalchemy import inspect, select, tuple_
from sqlalchemy.engine import make_url

from lenscope.errors import LenscopeError
from lenscope.model_libraries import optional
from lenscope.store import Node
from lenscope.store.schema import nodes, records
from lenscope.store.sweep_storage import OPTUNA_FILE, optuna_url
from lenscope.store.values import decode
from lenscope.ui.nodes import Missing
from lenscope.ui.readonly import ReadOnlyStore

SPEC_ATTR = "lenscope_sweep"  # the study attribute `lenscope sweep` writes its spec under (sweeps/study.py)
STATES = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "failed", "RUNNING": "running", "WAITING": "waiting"}
_FACT_KEYS = ("sweep/error", "sweep/objective")
_storages: dict[str, Any] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class TrialRow:
    """One trial as the sweep page lists it."""

    number: int
    state: str  # complete, pruned, failed, running or waiting
    value: float | None  # the objective; a pruned or running trial's last reported one
    params: dict[str, Any]
    node: str | None = None  # the trial run's final node
    step: int | None = None  # the step a pruned trial stopped at
    reason: str = ""  # why a failed trial failed
    seconds: float | None = None

    @property
    def lineage(self) -> str | None:
        """`name@nonce` of the trial's run, for its run page."""
        return self.node.rsplit(":", 1)[0] if self.node else None


@dataclass
class Sweep:
    """One study: what it searched, its trials, and its best completed trial (None when none completed)."""

    name: str
    job: str
    key: str
    direction: str  # "minimize" or "maximize"
    spec: dict[str, Any]
    trials: list[TrialRow]
    params: list[str]
    scales: dict[str, str] = field(default_factory=dict)  # param -> "linear", "log" or "choice"
    best: TrialRow | None = None
    importance: dict[str, float] = field(default_factory=dict)
    importance_problem: str = ""

    grid: int | None = None  # a grid sampler's number of points, read from its trials' search space

    def count(self, state: str) -> int:
        """How many trials are in `state`."""
        return sum(t.state == state for t in self.trials)

    @property
    def planned(self) -> int | str:
        """The trials the sweep will run: its budget (`--trials`), or a smaller grid's size ("?" when unknown)."""
        budget = self.spec.get("trials")
        budget = budget if isinstance(budget, int) and not isinstance(budget, bool) else None
        sizes = [n for n in (budget, self.grid) if n is not None]
        return min(sizes) if sizes else "?"


@dataclass(frozen=True)
class StudyRow:
    """One study on the sweeps list."""

    name: str
    job: str
    objective: str
    params: list[str]
    counts: dict[str, int]
    best: float | None


def _optuna() -> Any:
    module = optional("optuna", "sweep", "the UI's sweep pages")
    module.logging.set_verbosity(module.logging.WARNING)
    return module


def _readonly(url: str) -> tuple[str, dict[str, Any]]:
    """`url` opened so that the database refuses writes: SQLite read-only mode, a read-only PostgreSQL session."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return f"sqlite:///file:{quote(str(parsed.database))}?mode=ro&uri=true", {"connect_args": {"timeout": 30}}
    return url, {"pool_pre_ping": True, "connect_args": {"options": "-c default_transaction_read_only=on"}}


def _has_studies(store: ReadOnlyStore, url: str) -> bool:
    """Whether a sweep ever made Optuna's tables beside this store (the UI never makes them)."""
    if make_url(url).get_backend_name() == "sqlite":
        return (store.store.root / OPTUNA_FILE).is_file()
    with store.read() as connection:
        return inspect(connection).has_table("studies") and inspect(connection).has_table("version_info")


def storage(store: ReadOnlyStore) -> Any | None:
    """The store's Optuna storage opened read-only (kept for the life of the process), or None when there is none."""
    url = optuna_url(store.store.url, store.store.root)
    with _lock:
        if url in _storages:
            return _storages[url]
        if not _has_studies(store, url):
            return None
        module = _optuna()
        readonly, kwargs = _readonly(url)
        _storages[url] = module.storages.RDBStorage(readonly, engine_kwargs=kwargs, skip_table_creation=True)
        return _storages[url]


MAX_SPEC_CHARS = 1 << 20  # a sweep's spec as `lenscope sweep` writes it is a few hundred characters


def spec_problem(attrs: Any) -> tuple[dict[str, Any] | None, str]:
    """(the sweep spec a study's attributes hold, "") when `lenscope sweep` wrote it; (None, why not) for a study
    without one (""), or with a foreign value: not a JSON text of an object, nested too deep, or whose job,
    objective, sampler, pruner or params are not what `lenscope sweep` writes (texts, a count, a list of texts)."""
    text = attrs.get(SPEC_ATTR) if isinstance(attrs, dict) else None
    if text is None:
        return None, ""
    if not isinstance(text, str) or len(text) > MAX_SPEC_CHARS:
        return None, f"its {SPEC_ATTR} attribute is not a JSON text of at most {MAX_SPEC_CHARS} characters"
    try:
        spec = json.loads(text)
    except (ValueError, RecursionError):
        return None, f"its {SPEC_ATTR} attribute is not JSON (or is nested too deep)"
    if not isinstance(spec, dict):
        return None, f"its {SPEC_ATTR} attribute is a JSON {type(spec).__name__}, not an object"
    params = spec.get("params", [])
    texts = all(isinstance(spec.get(k, ""), str) for k in ("job", "objective", "sampler", "pruner"))
    trials = spec.get("trials")
    if not texts or not isinstance(params, list) or not all(isinstance(p, str) for p in params) \
            or not (trials is None or isinstance(trials, int) and not isinstance(trials, bool)):
        return None, f"its {SPEC_ATTR} attribute holds values lenscope sweep does not write"
    return spec, ""


def _spec(attrs: Any) -> dict[str, Any] | None:
    return spec_problem(attrs)[0]


def studies(store: ReadOnlyStore, skipped: list[str] | None = None) -> list[StudyRow]:
    """Every study `lenscope sweep` made beside the store, with its trial counts per state and best value; a study
    whose spec is foreign is left out, with a note (its name and why) added to `skipped`."""
    opened = storage(store)
    if opened is None:
        return []
    rows = []
    for study in opened.get_all_studies():
        spec, problem = spec_problem(study.user_attrs)
        if spec is None:
            if problem and skipped is not None:
                skipped.append(f"{study.study_name}: {problem}")
            continue
        trials = opened.get_all_trials(opened.get_study_id_from_name(study.study_name), deepcopy=False)
        counts: dict[str, int] = {}
        for trial in trials:
            state = STATES.get(trial.state.name, "failed")
            counts[state] = counts.get(state, 0) + 1
        done = [t.value for t in trials if t.state.name == "COMPLETE"]
        pick = min if study.direction.name == "MINIMIZE" else max
        rows.append(StudyRow(study.study_name, str(spec.get("job", "?")), str(spec.get("objective", "?")),
                             [str(p).split("=", 1)[0] for p in spec.get("params", [])], counts,
                             pick(done) if done else None))
    return rows


def load_sweep(store: ReadOnlyStore, name: str) -> Sweep:
    """The study `name` with every trial's true state; a Missing when the store has no such sweep."""
    opened = storage(store)
    if opened is None:
        raise Missing(f"no sweep {name!r}: this store holds no sweeps")
    module = _optuna()
    try:
        study = module.load_study(study_name=name, storage=opened, sampler=module.samplers.RandomSampler())
    except KeyError:
        study = None
    spec, problem = spec_problem(study.user_attrs) if study is not None else (None, "")
    if spec is None:
        raise Missing(f"no sweep {name!r} in this store" + (f": the study of that name is not one lenscope sweep "
                                                             f"made ({problem})" if problem else ""))
    trials = study.get_trials(deepcopy=False)
    facts = _node_facts(store, [_node_of(t) for t in trials])
    retried = _retried(module, trials)
    rows = [_row(t, facts, retried, spec) for t in trials]
    params = list(dict.fromkeys(p for t in trials for p in t.params))
    scales = {p: _scale(module, t.distributions[p]) for t in reversed(trials) for p in t.distributions}
    complete = [r for r in rows if r.state == "complete" and r.value is not None]
    maximize = study.direction.name == "MAXIMIZE"
    best = (max if maximize else min)(complete, key=lambda r: r.value) if complete else None
    sweep = Sweep(name, str(spec.get("job", "?")), str(spec.get("objective", "?")).rpartition(":")[0] or "?",
                  "maximize" if maximize else "minimize", spec, rows, params, scales, best)
    sweep.importance, sweep.importance_problem = _importance(module, study, len(complete))
    sweep.grid = _grid_size(trials) if spec.get("sampler") == "grid" else None
    return sweep


def _grid_size(trials: list[Any]) -> int | None:
    """How many points the grid sampler's search space has (Optuna records it on each trial it samples)."""
    for trial in trials:
        space = trial.system_attrs.get("search_space")
        if isinstance(space, dict) and all(isinstance(v, list) for v in space.values()):
            return math.prod(len(v) for v in space.values())
    return None


def _scale(module: Any, distribution: Any) -> str:
    if isinstance(distribution, module.distributions.CategoricalDistribution):
        return "choice"
    return "log" if getattr(distribution, "log", False) else "linear"


def _retried(module: Any, trials: list[Any]) -> dict[int, int]:
    """{failed trial: the trial that ran its params again} for trials whose worker died (Optuna's heartbeat)."""
    storages = module.storages
    callback = getattr(storages, "RetryHeartbeatStaleTrialCallback", None) or storages.RetryFailedTrialCallback
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # experimental in Optuna
        pairs = {callback.retried_trial_number(t): t.number for t in trials}
    pairs.pop(None, None)
    return pairs


def _node_of(trial: Any) -> str | None:
    """The trial run's node address the study recorded; None when it recorded none, or something else."""
    node = trial.user_attrs.get("node")
    return node if isinstance(node, str) else None


def _row(trial: Any, facts: dict[str, dict[str, Any]], retried: dict[int, int], spec: dict[str, Any]) -> TrialRow:
    state = STATES.get(trial.state.name, "failed")
    node = _node_of(trial)
    fact = facts.get(node, {})
    last = max(trial.intermediate_values, default=None)
    value = step = None
    if state == "complete":
        value = trial.value
    elif state in ("pruned", "running") and last is not None:
        value = trial.intermediate_values[last]
    if state == "pruned":  # stopped at its last report, where its run's final node is
        step = last if last is not None else Node.parse(node).seq if node in facts else None
    reason = _reason(trial, fact, retried, spec) if state == "failed" else ""
    seconds = (trial.datetime_complete - trial.datetime_start).total_seconds() \
        if trial.datetime_complete and trial.datetime_start else None
    if state == "running" and trial.datetime_start:
        seconds = (datetime.now() - trial.datetime_start).total_seconds()
    return TrialRow(trial.number, state, value, dict(trial.params), node, step, reason, seconds)


def _reason(trial: Any, fact: dict[str, Any], retried: dict[int, int], spec: dict[str, Any]) -> str:
    """Why a failed trial failed: what the sweep recorded, else what the store says of its run."""
    if trial.number in retried:
        return f"its worker stopped (no heartbeat); its params ran again as trial {retried[trial.number]}"
    said = trial.user_attrs.get("error") or fact.get("sweep/error") or fact.get("error")
    if said:
        return str(said)
    if fact and not isinstance(fact.get("sweep/objective"), (int, float)):
        key = str(spec.get("objective", "?")).rpartition(":")[0]
        return f"its run recorded no number under {key!r}"
    return "no reason recorded"


def _node_facts(store: ReadOnlyStore, addresses: list[str | None]) -> dict[str, dict[str, Any]]:
    """{address: status, error and the sweep's failure notes} for the trial nodes the store holds."""
    wanted: dict[tuple[str, int], Node] = {}
    for address in addresses:
        try:
            node = Node.parse(address) if address else None
        except LenscopeError:
            node = None
        if node is not None:
            wanted[(node.nonce, node.seq)] = node
    facts: dict[str, dict[str, Any]] = {}
    keys = list(wanted)
    with store.read() as connection:
        for start in range(0, len(keys), 400):
            chunk = keys[start:start + 400]
            found = connection.execute(select(nodes.c.id, nodes.c.name, nodes.c.nonce, nodes.c.seq, nodes.c.status,
                                              nodes.c.error)
                                       .where(tuple_(nodes.c.nonce, nodes.c.seq).in_(chunk))).all()
            ids = {r.id: wanted[(r.nonce, r.seq)].address for r in found if wanted[(r.nonce, r.seq)].name == r.name}
            for r in found:
                if r.id in ids:
                    facts[ids[r.id]] = {"status": r.status, "error": r.error}
            values = connection.execute(select(records.c.node_id, records.c.key, records.c.kind, records.c.num,
                                               records.c.txt)
                                        .where(records.c.node_id.in_(list(ids)), records.c.key.in_(_FACT_KEYS))
                                        .order_by(records.c.id))
            for r in values:
                facts[ids[r.node_id]][r.key] = decode(r.kind, r.num, r.txt)
    return facts


def _importance(module: Any, study: Any, complete: int) -> tuple[dict[str, float], str]:
    """Optuna's param importances over the completed trials, or why there are none."""
    if complete < 2:
        return {}, f"{complete} completed trial{'s' if complete != 1 else ''}: importance needs at least 2"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = module.importance.get_param_importances(study)
    except (ImportError, ValueError, RuntimeError) as error:
        return {}, f"Optuna could not compute it: {error}"
    return {str(k): float(v) for k, v in found.items()}, ""

