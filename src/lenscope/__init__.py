"""lenscope: see what a JAX model learns, with analyses that share the trainer's lifecycle.

Names are imported on first use, so `lenscope ls`/`show`/`get` start without loading JAX.
"""

from __future__ import annotations

import importlib
from typing import Any

from .version import VERSION as __version__

_EXPORTS = {
    "AnalysisBase": "lenscope.analysis",
    "AnalysisCfg": "lenscope.analysis.cfg",
    "BaseTrainer": "lenscope.training",
    "CaptureError": "lenscope.analysis.trace",
    "ConfigError": "lenscope.errors",
    "DebugInputs": "lenscope.analysis",
    "JobError": "lenscope.errors",
    "LenscopeError": "lenscope.errors",
    "Node": "lenscope.store",
    "NodeRecord": "lenscope.store",
    "OpAnalysis": "lenscope.analysis.builtin",
    "Payload": "lenscope.store",
    "Query": "lenscope.store",
    "Store": "lenscope.store",
    "StoreError": "lenscope.errors",
    "TrainState": "lenscope.training",
    "TrainerConfig": "lenscope.training",
    "UsageError": "lenscope.errors",
    "build_job": "lenscope.runner",
    "execute_analysis_op": "lenscope.analysis.execution",
    "execute_analysis_step": "lenscope.analysis.execution",
    "field": "lenscope.config",
    "hydrate": "lenscope.config",
    "job": "lenscope.registry",
    "jobs": "lenscope.registry",
    "load_table": "lenscope.analysis.tables",
    "resolve": "lenscope.registry",
    "run_analyses": "lenscope.runner",
    "run_job": "lenscope.runner",
    "to_yaml": "lenscope.config",
}
_MODULES = {"ops": "lenscope.ops", "plots": "lenscope.analysis.plots"}

__all__ = sorted([*_EXPORTS, *_MODULES])


def __getattr__(name: str) -> Any:
    """Import a public name on first access and cache it on the package."""
    if name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module 'lenscope' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
