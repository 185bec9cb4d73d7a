"""An Optuna study kept beside the lineage store: in the same PostgreSQL database, or a file in the store folder (E1).

A study carries everything a worker needs to join it (job, config sources, params, objective, sampler,
pruner, trial budget) as user attributes, so `lenscope sweep --join STUDY` on another machine runs the
same sweep against the same store.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from ..errors import UsageError, hint
from ..model_libraries import optional
from ..store import Node, Store
from ..store.sweep_storage import OPTUNA_FILE, optuna_url
from .params import Param, parse_objective, parse_param

SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "hyperband", "none")
HEARTBEAT_ENV = "LENSCOPE_SWEEP_HEARTBEAT_S"


def heartbeat_s() -> float:
    """A running trial's heartbeat period (5 s, or $LENSCOPE_SWEEP_HEARTBEAT_S); one silent for 3 periods (its
    worker died) is failed and queued again."""
    given = os.environ.get(HEARTBEAT_ENV, "5")
    try:
        period = float(given)
    except ValueError:
        period = -1.0
    if not 0 < period <= 3600:
        raise UsageError(f"${HEARTBEAT_ENV}={given!r}: expected a number of seconds in (0, 3600], e.g. 5")
    return period


_ATTR = "lenscope_sweep"


def optuna():
    """The optuna module, or a UsageError saying how to install it."""
    module = optional("optuna", "sweep", "lenscope sweep")
    module.logging.set_verbosity(module.logging.WARNING)
    return module


@dataclass(frozen=True)
class SweepSpec:
    """What every worker of one sweep runs: the job, its sources, the searched params and the objective."""

    job: str
    sources: list[str] = field(default_factory=list)
    params: list[str] = field(default_factory=list)
    objective: str = "val/loss:min"
    sampler: str = "tpe"
    pruner: str = "median"
    trials: int = 10
    seed: int | None = None

    def parsed(self) -> list[Param]:
        """The params as Param objects."""
        return [parse_param(text) for text in self.params]

    @property
    def key(self) -> str:
        """The objective's value key."""
        return parse_objective(self.objective)[0]

    @property
    def direction(self) -> str:
        """"maximize" or "minimize"."""
        return "maximize" if parse_objective(self.objective)[1] == "max" else "minimize"


def storage_url(store: Store) -> str:
    """The Optuna storage of `store`: its PostgreSQL database itself, else optuna.db in the store folder."""
    return optuna_url(store.url, store.root)


@contextlib.contextmanager
def _creation_lock(store: Store, url: str, purpose: str = "storage") -> Iterator[None]:
    """Held while Optuna creates or migrates its tables: workers started together on a fresh store take turns
    (Optuna's own create-then-stamp is not safe under concurrent first use); with `purpose="budget"`, while a
    worker counts the trials begun and begins one. A file lock beside optuna.db; a PostgreSQL advisory lock."""
    if url.startswith("sqlite"):
        suffix = "" if purpose == "storage" else f".{purpose}"
        with open(Path(store.root) / f"{OPTUNA_FILE}{suffix}.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        return
    engine = create_engine(url, pool_pre_ping=True)
    key = zlib.crc32(f"lenscope optuna {purpose}".encode())
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": key})
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})
    finally:
        engine.dispose()


def budget_lock(store: Store) -> contextlib.AbstractContextManager[None]:
    """Held from counting a study's trials to beginning the next one, so workers never begin more than the budget."""
    return _creation_lock(store, storage_url(store), "budget")


def _storage(store: Store) -> Any:
    module = optuna()
    url = storage_url(store)
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    with _creation_lock(store, url), warnings.catch_warnings():
        warnings.simplefilter("ignore", module.exceptions.ExperimentalWarning)  # heartbeats: experimental in Optuna
        retry = _retry_callback(module)(max_retry=2)
        return module.storages.RDBStorage(url, engine_kwargs=kwargs, heartbeat_interval=heartbeat_s(),
                                          grace_period=3 * heartbeat_s(), heartbeat_stale_trial_callback=retry)


def _retry_callback(module: Any) -> type:
    """Optuna's callback that queues a dead worker's trial again (renamed in Optuna 4.9; the old name warns there)."""
    storages = module.storages
    return getattr(storages, "RetryHeartbeatStaleTrialCallback", None) or storages.RetryFailedTrialCallback


def sampler(spec: SweepSpec, seed: int | None) -> Any:
    """The Optuna sampler `spec` names (grid over every param's values)."""
    module = optuna()
    if spec.sampler == "grid":
        return module.samplers.GridSampler({p.path: p.grid() for p in spec.parsed()}, seed=seed)
    if spec.sampler == "random":
        return module.samplers.RandomSampler(seed=seed)
    return module.samplers.TPESampler(seed=seed)


def pruner(spec: SweepSpec) -> Any:
    """The Optuna pruner `spec` names; `none` never prunes."""
    module = optuna()
    if spec.pruner == "median":
        return module.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)
    if spec.pruner == "hyperband":
        return module.pruners.HyperbandPruner()
    return module.pruners.NopPruner()


def check_choices(spec: SweepSpec) -> None:
    """Refuse an unknown sampler or pruner, or a budget below one trial."""
    if spec.sampler not in SAMPLERS:
        raise UsageError(f"unknown --sampler {spec.sampler!r}{hint(spec.sampler, SAMPLERS)}; "
                         f"expected one of {', '.join(SAMPLERS)}")
    if spec.pruner not in PRUNERS:
        raise UsageError(f"unknown --pruner {spec.pruner!r}{hint(spec.pruner, PRUNERS)}; "
                         f"expected one of {', '.join(PRUNERS)}")
    if spec.trials < 1:
        raise UsageError(f"--trials must be >= 1, got {spec.trials}")


def create(store: Store, spec: SweepSpec, name: str | None = None) -> Any:
    """A new study for `spec` in `store`'s Optuna storage; its name defaults to <job node name>-<6 hex>."""
    module = optuna()
    name = name or f"{Node.clean_name(spec.job.rsplit(':', 1)[-1].replace('.py', ''))}-{secrets.token_hex(3)}"
    storage = _storage(store)
    if name in module.get_all_study_names(storage):
        raise UsageError(f"a sweep named {name!r} already exists in this store: join it with --join {name}, "
                         "or choose another --study name")
    study = module.create_study(storage=storage, study_name=name, direction=spec.direction,
                                sampler=sampler(spec, spec.seed), pruner=pruner(spec))
    study.set_user_attr(_ATTR, json.dumps(asdict(spec)))
    return study


def load(store: Store, name: str) -> tuple[Any, SweepSpec]:
    """The study `name` in `store`'s Optuna storage and its sweep spec; a UsageError listing the sweeps there."""
    module = optuna()
    storage = _storage(store)
    names = module.get_all_study_names(storage)
    if name not in names:
        raise UsageError(f"no sweep {name!r} in this store{hint(name, names)}; its sweeps: "
                         f"{', '.join(names) or 'none'}")
    attrs = module.load_study(study_name=name, storage=storage).user_attrs.get(_ATTR)
    if attrs is None:
        raise UsageError(f"study {name!r} was not made by lenscope sweep (it has no {_ATTR} attribute)")
    spec = SweepSpec(**json.loads(attrs))
    # A joining worker draws its own points (no shared seed: two workers would draw the same ones).
    return module.load_study(study_name=name, storage=storage, sampler=sampler(spec, None), pruner=pruner(spec)), spec
