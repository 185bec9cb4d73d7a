"""Built-in analyses by name (D5), and lazy notebook wrappers: `lenscope.ops.<name>(trainer, batch=None, **params)`.

    import lenscope.ops
    stats = lenscope.ops.activation_stats(trainer, names_filter="blocks_*")  # an AnalysisBatch
    stats = lenscope.activation_stats(trainer)  # the same wrapper, reached from the top level

A wrapper is made on first attribute access (module `__getattr__`, PEP 562) and imports its
analysis only when first called. Keyword arguments that are AnalysisCfg fields (names_filter,
split, name, input_store, cache_dir) configure the run; the others are the analysis's params.
A wrapper is also an AnalysisCfg target: `AnalysisCfg(target_op=lenscope.ops.activation_stats)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .analysis.cfg import AnalysisCfg, option_fields
from .analysis.op_registry import get, names, register  # noqa: F401  (register is lenscope.ops.register)
from .analysis.running import execute_analysis_op
from .errors import hint

_WRAPPERS: dict[str, OpWrapper] = {}  # op name -> its wrapper, made on first access


class OpWrapper:
    """A callable op: `op(trainer, batch=None, **params)` returns one batch's results in memory (NumPy)."""

    def __init__(self, name: str) -> None:
        self.name = self.op_name = name  # op_name: what AnalysisCfg(target_op=...) reads
        self.__name__ = self.__qualname__ = name
        self.__doc__ = f"Run the {name!r} analysis on `trainer`'s state and one batch; returns its results."

    def cfg(self, **params: Any) -> Any:
        """The AnalysisCfg a call with these keyword arguments runs."""
        fields = option_fields()
        known = {k: v for k, v in params.items() if k in fields}
        rest = {k: v for k, v in params.items() if k not in fields}
        return AnalysisCfg(analysis=self.name, params=rest, **known)

    def __call__(self, trainer: Any, batch: Mapping[str, Any] | None = None, batch_idx: int = 0, *,
                 analysis_inputs: Mapping[str, Any] | None = None, **params: Any) -> Any:
        """Run on `trainer` (restored or set up first if it has no state); returns an AnalysisBatch."""
        get(self.name)
        return execute_analysis_op(trainer, batch, batch_idx, self.cfg(**params), analysis_inputs)

    def __repr__(self) -> str:
        return f"<lenscope op {self.name}>"


def __getattr__(name: str) -> OpWrapper:
    if name.startswith("__") or name not in names():
        raise AttributeError(f"module 'lenscope.ops' has no op {name!r}{hint(name, names())}; "
                             f"ops: {', '.join(names())}")
    wrapper = _WRAPPERS.get(name)
    if wrapper is None:
        wrapper = _WRAPPERS[name] = OpWrapper(name)
    return wrapper


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(names()))
