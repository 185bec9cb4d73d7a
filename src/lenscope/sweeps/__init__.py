"""Sweeps on Optuna: trials as lenscope runs, the study beside the store, workers joining one study (E1)."""

from .params import Param, parse_objective, parse_param
from .run import Outcome, best, run_trials
from .study import SweepSpec, create, load, storage_url

__all__ = ["Outcome", "Param", "SweepSpec", "best", "create", "load", "parse_objective", "parse_param",
           "run_trials", "storage_url"]
