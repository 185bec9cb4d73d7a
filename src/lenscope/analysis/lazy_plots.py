"""The plot helpers as AnalysisBase attributes and the plotting prewarm, loading matplotlib on first use.

matplotlib costs about half a second to import; an analysis whose plot() returns JSON or None, and every
trainer, should not pay it. `self.heatmap` is `lenscope.analysis.plots.heatmap` itself, looked up when used.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

__all__ = ["PlotHelper", "prewarm_plots"]


def _plots() -> ModuleType:
    """lenscope.analysis.plots (and with it matplotlib), imported on the first call."""
    # lazy: matplotlib loads with the first figure, not with every analysis
    from . import plots
    return plots


class PlotHelper:
    """A class attribute that is the plot helper of that name (a plain function, like a staticmethod)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        return getattr(_plots(), self.name)


@functools.cache
def prewarm_plots() -> None:
    """Load the plotting stack once per process (fonts, PDF backend), e.g. on a tandem analysis's warm-up thread."""
    _plots().prewarm()
