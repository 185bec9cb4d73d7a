"""Analysis: AnalysisBase, running analyses (one path), tables, the eager Debugger and plot helpers.

`BaseTrainer.run_analysis` and `analysis_step` reach `running` by name (training.trainer.analysis_entry).
"""

from ..capture import DebugInputs
from ..renamed import keep_old_names
from . import op_registry, patch_sweeps, render, table_mode, table_schema
from .base import AnalysisBase
from .batch import AnalysisBatch, AnalysisStore
from .cfg import AnalysisCfg
from .running import execute_analysis_op, execute_analysis_step, run_analysis

__all__ = ["AnalysisBase", "AnalysisBatch", "AnalysisCfg", "AnalysisStore", "DebugInputs", "execute_analysis_op",
           "execute_analysis_step", "run_analysis"]

keep_old_names(__name__, {"registry": op_registry, "publish": render, "tables": table_schema,
                          "table_run": table_mode, "interventions": patch_sweeps,
                          "sweeps": patch_sweeps})
