"""The execution helpers under the seed-002 module name: `from lenscope.analysis.execution import execute_analysis_op`.

They live in analysis.running, the one run path; this module only names them.
"""

from .batch import AnalysisBatch
from .running import execute_analysis_op, execute_analysis_step

__all__ = ["AnalysisBatch", "execute_analysis_op", "execute_analysis_step"]
