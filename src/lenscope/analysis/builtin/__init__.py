"""General analyses for any linen, NNX or Equinox model, selected by module path; registered in `lenscope.ops`."""

from ...renamed import keep_old_names
from . import intervention_op
from .base import OpAnalysis, layer_output

__all__ = ["OpAnalysis", "layer_output"]

keep_old_names(__name__, {"interventions_base": intervention_op})
