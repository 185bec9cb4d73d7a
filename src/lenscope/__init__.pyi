# The public names of lenscope, and the one list of them: lenscope/__init__.py reads these imports to import each
# name on first use and derives __all__ from them; type checkers and IDEs read this file as the package's stub.
from typing import Any

from . import dictionaries as dictionaries
from . import ops as ops
from . import plots as plots
from .analysis import AnalysisBase as AnalysisBase
from .analysis.batch import AnalysisBatch as AnalysisBatch
from .analysis.batch import AnalysisResults as AnalysisResults
from .analysis.builtin import OpAnalysis as OpAnalysis
from .analysis.cfg import AnalysisCfg as AnalysisCfg
from .analysis.running import execute_analysis_op as execute_analysis_op
from .analysis.running import execute_analysis_step as execute_analysis_step
from .analysis.table_mode import TableConfig as TableConfig
from .analysis.table_schema import load_table as load_table
from .capture import CaptureError as CaptureError
from .capture import DebugInputs as DebugInputs
from .config import field as field
from .config import hydrate as hydrate
from .config import to_yaml as to_yaml
from .dictionaries import SaeConfig as SaeConfig
from .dictionaries import SaeTrainer as SaeTrainer
from .errors import ConfigError as ConfigError
from .errors import JobError as JobError
from .errors import LenscopeError as LenscopeError
from .errors import StoreError as StoreError
from .errors import UsageError as UsageError
from .job_registry import job as job
from .job_registry import jobs as jobs
from .job_registry import resolve as resolve
from .models import from_pretrained as from_pretrained
from .models import from_pretrained_no_processing as from_pretrained_no_processing
from .models.pretrained import FactoredMatrix as FactoredMatrix
from .models.pretrained import Pretrained as Pretrained
from .runner import build_job as build_job
from .runner import run_analyses as run_analyses
from .runner import run_job as run_job
from .store import Node as Node
from .store import NodeRecord as NodeRecord
from .store import Payload as Payload
from .store import Query as Query
from .store import Store as Store
from .training import BaseTrainer as BaseTrainer
from .training import TrainerConfig as TrainerConfig
from .training import TrainState as TrainState
from .training.data import ArrayData as ArrayData
from .training.loop import StopTraining as StopTraining
from .training.phase import Phase as Phase
from .training.pretrained import PretrainedConfig as PretrainedConfig
from .training.pretrained import PretrainedModel as PretrainedModel

__version__: str
__all__: list[str]

def __getattr__(name: str) -> Any: ...  # op wrappers: lenscope.activation_stats is lenscope.ops.activation_stats
