"""Sweeps on Optuna: trials as lenscope runs, the study beside the store, workers joining one study (E1).

`run_trials`, `best` and `Outcome` (run.py, which trains, so imports JAX) load on first access: a process that
only creates or loads studies (a worker waiting to join, the web UI's neighbours) starts without JAX.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names
from .params import Param, parse_objective, parse_param
from .study import SweepSpec, create, load, storage_url

if TYPE_CHECKING:
    from .run import Outcome, best, run_trials

_LAZY = {"Outcome": ".run", "best": ".run", "run_trials": ".run"}

__all__ = ["Outcome", "Param", "SweepSpec", "best", "create", "load", "parse_objective", "parse_param",
           "run_trials", "storage_url"]


__getattr__ = lazy_names(globals(), _LAZY)
