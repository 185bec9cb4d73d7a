"""The slot the analysis layer fills so that `BaseTrainer.run_analysis` works without training importing analysis."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Protocol

PROVIDER = "lenscope.analysis"  # the one module that registers the analysis runner when imported


class AnalysisRunner(Protocol):
    """Runs analyses (AnalysisCfg objects, names or classes) on a trainer's state; returns an analysis store (a
    mapping name -> result)."""

    def __call__(self, trainer: Any, *cfgs: Any) -> Mapping[str, Any]: ...


_SLOT: dict[str, AnalysisRunner] = {}


def register_analysis_runner(runner: AnalysisRunner) -> AnalysisRunner:
    """Install the analysis runner (the analysis layer does, on import); returns it, so it decorates."""
    _SLOT["runner"] = runner
    return runner


def analysis_runner() -> AnalysisRunner:
    """The registered analysis runner, importing its provider first if nothing registered one yet."""
    if "runner" not in _SLOT:
        importlib.import_module(PROVIDER)  # lazy registration by module name, as the job and op registries do
    if "runner" not in _SLOT:
        raise RuntimeError(f"importing {PROVIDER} registered no analysis runner (training.extensions)")
    return _SLOT["runner"]
