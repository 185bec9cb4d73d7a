"""Several analyses on one restored state (D4): `trainer.run_analysis(*cfgs)` and `lenscope run JOB --analysis NAME`."""

from __future__ import annotations

from typing import Any

from ..errors import UsageError
from .cfg import AnalysisCfg, coerce_cfg
from .execution import (
    bind,
    combined_class,
    enable_compilation_cache,
    ensure_state,
    prepare,
    resolve_params,
)


def check_cfgs(trainer: Any, cfgs: tuple) -> list[tuple[AnalysisCfg, type, str]]:
    """Resolve and validate every cfg before anything runs: known analyses and params, distinct names, one cache."""
    checked: list[tuple[AnalysisCfg, type, str]] = []
    seen: dict[str, str] = {}
    for item in cfgs:
        cfg = coerce_cfg(item)
        cls = combined_class(cfg.resolve(), type(trainer))
        resolve_params(cls, cfg)
        name = cfg.result_name(cls)
        if name in seen:
            raise UsageError(f"two analyses would both save results as {name!r} ({seen[name]} and {cfg.analysis!r}); "
                             "give one a distinct AnalysisCfg(name=...)")
        seen[name] = repr(cfg.analysis)
        checked.append((cfg, cls, name))
    folders = {str(cfg.cache_dir) for cfg, _, _ in checked if cfg.cache_dir is not None}
    if len(folders) > 1:
        raise UsageError(f"one process has one JAX compilation cache; the analyses name several: {sorted(folders)}")
    return checked


def run_analysis(trainer: Any, *cfgs: Any) -> dict[str, Any]:
    """Restore the trainer's state once, then run each analysis in turn on it; returns {name: result}.

    Each analysis fires on_analysis_start, on_analysis_epoch_end (per pass) and on_analysis_end.
    A table analysis returns its Dataset (process 0); others return their gathered results.
    """
    if not cfgs:
        raise UsageError("run_analysis needs at least one analysis (an AnalysisCfg, a registered name or a class)")
    checked = check_cfgs(trainer, cfgs)
    for cfg, _, _ in checked:
        if cfg.cache_dir is not None:
            enable_compilation_cache(cfg.cache_dir)
    ensure_state(trainer)
    results: dict[str, Any] = {}
    for cfg, _, name in checked:
        analysis = prepare(bind(trainer, cfg))
        results[name] = analysis.run()
    return results
