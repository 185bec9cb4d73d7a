"""Analysis: AnalysisBase, running analyses (one path), tables, the eager Debugger and plot helpers.

`BaseTrainer.run_analysis` and `analysis_step` reach `running` by name (training.trainer.analysis_entry).
"""

from ..capture import DebugInputs
from .base import AnalysisBase
from .batch import AnalysisBatch, AnalysisResults
from .cfg import AnalysisCfg
from .running import execute_analysis_op, execute_analysis_step, run_analysis

__all__ = ["AnalysisBase", "AnalysisBatch", "AnalysisCfg", "AnalysisResults", "DebugInputs", "execute_analysis_op",
           "execute_analysis_step", "run_analysis"]
