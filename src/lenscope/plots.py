"""`import lenscope.plots`: the plot helpers of lenscope.analysis.plots under the name the docs use.

The module object is the same one (as lenscope/renamed.py does for old names), so `lenscope.plots.STYLE`
is the style the helpers read.
"""

import sys

from .analysis import plots as _plots

sys.modules[__name__] = _plots
