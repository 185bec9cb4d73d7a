"""Per-epoch metric accumulation for `log()`/`log_dict()`, printed as a table at epoch end."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


class MetricLog:
    """Running means of named scalars over one epoch."""

    def __init__(self) -> None:
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def add(self, name: str, value: float, weight: int = 1) -> None:
        """Accumulate one value (weighted by `weight` examples)."""
        value = float(np.asarray(value))
        self._sums[name] = self._sums.get(name, 0.0) + value * weight
        self._counts[name] = self._counts.get(name, 0) + weight

    def add_all(self, values: Mapping[str, float], weight: int = 1) -> None:
        """Accumulate several values at once."""
        for name, value in values.items():
            self.add(name, value, weight)

    def means(self) -> dict[str, float]:
        """The mean of each metric so far."""
        return {k: self._sums[k] / self._counts[k] for k in sorted(self._sums)}

    def reset(self) -> None:
        """Start a new epoch."""
        self._sums.clear()
        self._counts.clear()


def table(title: str, values: Mapping[str, float]) -> str:
    """A two-column text table of metric means."""
    width = max([len(k) for k in values] + [len("metric")])
    rule = "-" * (width + 16)
    lines = [title, rule, f"{'metric':<{width}}  {'value':>12}", rule]
    lines += [f"{k:<{width}}  {v:>12.6g}" for k, v in values.items()]
    lines.append(rule)
    return "\n".join(lines)
