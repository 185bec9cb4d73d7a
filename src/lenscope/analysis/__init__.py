"""Analysis: AnalysisBase, running analyses (one path), tables, the eager Debugger and plot helpers.

Importing it registers the analysis runner behind `BaseTrainer.run_analysis` (training.extensions).
"""

from ..capture import DebugInputs
from .base import AnalysisBase
from .batch import AnalysisBatch, AnalysisStore
from .cfg import AnalysisCfg
from .running import execute_analysis_op, execute_analysis_step, run_analysis  # importing registers the runner

__all__ = ["AnalysisBase", "AnalysisBatch", "AnalysisCfg", "AnalysisStore", "DebugInputs", "execute_analysis_op",
           "execute_analysis_step", "run_analysis"]
