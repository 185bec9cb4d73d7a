"""Analysis: AnalysisBase, running analyses (one path), tables, the eager Debugger and plot helpers.

Importing it registers the analysis runner behind `BaseTrainer.run_analysis` (training.extensions).
"""

from ..capture import DebugInputs
from . import running as _running  # noqa: F401  (registers the analysis runner)
from .base import AnalysisBase

__all__ = ["AnalysisBase", "DebugInputs"]
