"""Analysis: AnalysisBase, capture in one compiled trace, the eager Debugger and plot helpers."""

from .base import AnalysisBase
from .inputs import DebugInputs

__all__ = ["AnalysisBase", "DebugInputs"]
