"""lenscope: see what a JAX model learns, with analyses that share the trainer's lifecycle.

Names are imported on first use (the `_EXPORTS` table), so `lenscope ls`/`show`/`get` start without
loading JAX; the TYPE_CHECKING block imports the same objects for type checkers and IDEs, and `__all__`
lists them (tests/test_public_api.py keeps the three in step).

Op wrappers are also reachable here (`lenscope.activation_stats` is `lenscope.ops.activation_stats`),
looked up in the op registry on first access. They are not in `__all__`: the registry grows at run
time (`lenscope.ops.register`), and a name here (e.g. `Store`) always wins over an op of that name.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from . import job_registry
from .renamed import keep_old_names
from .version import VERSION

__version__ = VERSION
keep_old_names(__name__, {"registry": job_registry})

if TYPE_CHECKING:
    from . import ops
    from .analysis import AnalysisBase, plots
    from .analysis.batch import AnalysisBatch, AnalysisStore
    from .analysis.builtin import OpAnalysis
    from .analysis.cfg import AnalysisCfg
    from .analysis.running import execute_analysis_op, execute_analysis_step
    from .analysis.table_mode import TableConfig
    from .analysis.tables import load_table
    from .capture import CaptureError, DebugInputs
    from .config import field, hydrate, to_yaml
    from .errors import ConfigError, JobError, LenscopeError, StoreError, UsageError
    from .job_registry import job, jobs, resolve
    from .runner import build_job, run_analyses, run_job
    from .store import Node, NodeRecord, Payload, Query, Store
    from .training import BaseTrainer, TrainerConfig, TrainState
    from .training.data import ArrayData
    from .training.phase import Phase

_EXPORTS = {
    "AnalysisBase": "lenscope.analysis",
    "AnalysisBatch": "lenscope.analysis.batch",
    "AnalysisStore": "lenscope.analysis.batch",
    "AnalysisCfg": "lenscope.analysis.cfg",
    "ArrayData": "lenscope.training.data",
    "BaseTrainer": "lenscope.training",
    "CaptureError": "lenscope.capture",
    "ConfigError": "lenscope.errors",
    "DebugInputs": "lenscope.capture",
    "JobError": "lenscope.errors",
    "LenscopeError": "lenscope.errors",
    "Node": "lenscope.store",
    "NodeRecord": "lenscope.store",
    "OpAnalysis": "lenscope.analysis.builtin",
    "Payload": "lenscope.store",
    "Phase": "lenscope.training.phase",
    "Query": "lenscope.store",
    "Store": "lenscope.store",
    "StoreError": "lenscope.errors",
    "TableConfig": "lenscope.analysis.table_mode",
    "TrainState": "lenscope.training",
    "TrainerConfig": "lenscope.training",
    "UsageError": "lenscope.errors",
    "build_job": "lenscope.runner",
    "execute_analysis_op": "lenscope.analysis.running",
    "execute_analysis_step": "lenscope.analysis.running",
    "field": "lenscope.config",
    "hydrate": "lenscope.config",
    "job": "lenscope.job_registry",
    "jobs": "lenscope.job_registry",
    "load_table": "lenscope.analysis.table_schema",
    "resolve": "lenscope.job_registry",
    "run_analyses": "lenscope.runner",
    "run_job": "lenscope.runner",
    "to_yaml": "lenscope.config",
}
_MODULES = {"ops": "lenscope.ops", "plots": "lenscope.analysis.plots"}

__all__ = [
    "AnalysisBase",
    "AnalysisBatch",
    "AnalysisCfg",
    "AnalysisStore",
    "ArrayData",
    "BaseTrainer",
    "CaptureError",
    "ConfigError",
    "DebugInputs",
    "JobError",
    "LenscopeError",
    "Node",
    "NodeRecord",
    "OpAnalysis",
    "Payload",
    "Phase",
    "Query",
    "Store",
    "StoreError",
    "TableConfig",
    "TrainState",
    "TrainerConfig",
    "UsageError",
    "build_job",
    "execute_analysis_op",
    "execute_analysis_step",
    "field",
    "hydrate",
    "job",
    "jobs",
    "load_table",
    "ops",
    "plots",
    "resolve",
    "run_analyses",
    "run_job",
    "to_yaml",
]


def __getattr__(name: str) -> Any:
    """Import a public name (or an op wrapper of lenscope.ops) on first access and cache it on the package."""
    if name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif _may_be_op(name) and name in _op_names():
        value = getattr(importlib.import_module(_MODULES["ops"]), name)
    else:
        raise AttributeError(f"module 'lenscope' has no attribute {name!r} (public names: lenscope.__all__; "
                             "ops: dir(lenscope.ops))")
    globals()[name] = value
    return value


def _may_be_op(name: str) -> bool:
    """Whether `name` could be an op: not private, and not a submodule (`from lenscope import capture` asks here
    first, before importing it)."""
    return name.isidentifier() and not name.startswith("_") and importlib.util.find_spec(f"lenscope.{name}") is None


def _op_names() -> list[str]:
    """The registered op names (imports the analysis layer: only asked for names lenscope itself lacks)."""
    return importlib.import_module("lenscope.analysis.op_registry").names()


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
