"""General analyses for any linen, NNX or Equinox model, selected by module path; registered in `lenscope.ops`."""

from .base import OpAnalysis, layer_output

__all__ = ["OpAnalysis", "layer_output"]
