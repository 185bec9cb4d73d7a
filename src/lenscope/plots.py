"""The plot helpers (`from lenscope import plots`): heatmap, heatmaps, line, bar, scatter, their STYLE, PDF bytes.

They are defined in lenscope.analysis.plots, beside the analyses that draw with them (AnalysisBase.heatmap is
plots.heatmap); this module is their public name. STYLE is the same dict, so a change to it reaches the helpers.
"""

from .analysis.plots import STYLE, bar, heatmap, heatmaps, line, prewarm, scatter, to_pdf_bytes

__all__ = ["STYLE", "bar", "heatmap", "heatmaps", "line", "prewarm", "scatter", "to_pdf_bytes"]
