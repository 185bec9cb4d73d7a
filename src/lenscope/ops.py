"""Built-in analyses by name (D5), and lazy notebook wrappers: `lenscope.ops.<name>(trainer, batch=None, **params)`.

    import lenscope.ops
    stats = lenscope.ops.activation_stats(trainer, names_filter="blocks_*")

A wrapper is made on first attribute access (module `__getattr__`, PEP 562) and imports its
analysis only when first called. Keyword arguments that are AnalysisCfg fields (names_filter,
split, name, input_store, cache_dir) configure the run; the others are the analysis's params.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import Any

from .errors import UsageError, hint

# Explicit registry: op name -> analysis class, or "module:Class" imported on first use.
_OPS: dict[str, type | str] = {
    "activation_stats": "lenscope.analysis.builtin.activations:ActivationStats",
    "attention_patterns": "lenscope.analysis.builtin.attention:AttentionPatterns",
    "logit_lens": "lenscope.analysis.builtin.logit_lens:LogitLens",
    "weight_spectrum": "lenscope.analysis.builtin.spectrum:WeightSpectrum",
}
_WRAPPERS: dict[str, OpWrapper] = {}


def register(name: str):
    """Class decorator: register an analysis class as op `name` (then `lenscope.ops.<name>` wraps it)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise UsageError(f"op names must be Python identifiers (they become lenscope.ops.<name>), got {name!r}")
    if name in globals():
        raise UsageError(f"op name {name!r} would hide lenscope.ops.{name}; choose another name")

    def add(cls: type) -> type:
        existing = _OPS.get(name)
        if existing is not None and existing is not cls and _qualname(existing) != _qualname(cls):
            raise UsageError(f"op name {name!r} is taken by {_qualname(existing)}")
        _OPS[name] = cls
        return cls

    return add


def _qualname(target: type | str) -> str:
    return target if isinstance(target, str) else f"{target.__module__}:{target.__qualname__}"


def names() -> list[str]:
    """Registered op names, sorted."""
    return sorted(_OPS)


def get(name: str) -> type:
    """The analysis class registered as `name` (imported on first use)."""
    if name not in _OPS:
        raise UsageError(f"unknown op {name!r}{hint(name, _OPS)}; ops: {', '.join(names())}")
    target = _OPS[name]
    if isinstance(target, str):
        module, attr = target.split(":")
        target = getattr(importlib.import_module(module), attr)
        _OPS[name] = target
    return target


class OpWrapper:
    """A callable op: `op(trainer, batch=None, **params)` returns one batch's results in memory (NumPy)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.__name__ = self.__qualname__ = name
        self.__doc__ = f"Run the {name!r} analysis on `trainer`'s state and one batch; returns its results."

    def cfg(self, **params: Any) -> Any:
        """The AnalysisCfg a call with these keyword arguments runs."""
        from .analysis.cfg import AnalysisCfg

        fields = {f.name for f in dataclasses.fields(AnalysisCfg)} - {"analysis", "params"}
        known = {k: v for k, v in params.items() if k in fields}
        rest = {k: v for k, v in params.items() if k not in fields}
        return AnalysisCfg(analysis=self.name, params=rest, **known)

    def __call__(self, trainer: Any, batch: Mapping[str, Any] | None = None, *,
                 analysis_inputs: Mapping[str, Any] | None = None, **params: Any) -> Any:
        """Run on `trainer` (restored or set up first if it has no state) and return the results."""
        from .analysis.execution import execute_analysis_op

        get(self.name)
        return execute_analysis_op(trainer, batch, self.cfg(**params), analysis_inputs)

    def __repr__(self) -> str:
        return f"<lenscope op {self.name}>"


def __getattr__(name: str) -> OpWrapper:
    if name.startswith("__") or name not in _OPS:
        raise AttributeError(f"module 'lenscope.ops' has no op {name!r}{hint(name, _OPS)}; ops: {', '.join(names())}")
    wrapper = _WRAPPERS.get(name)
    if wrapper is None:
        wrapper = _WRAPPERS[name] = OpWrapper(name)
    return wrapper


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_OPS))
