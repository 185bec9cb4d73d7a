"""A grokking trainer slowed down on the host side, so a test can kill it mid-run."""

import os
import sys
import time

from lenscope.examples.grokking import GrokTrainer
from lenscope.examples.grokking_analyses import SummaryAnalysis


class SlowGrok(GrokTrainer):
    """Sleeps a little before each batch (outside any trace; $SLOW_GROK_S seconds, default 0.02); numerics are
    unchanged."""

    def batch(self, split, index=0):
        time.sleep(float(os.environ.get("SLOW_GROK_S", "0.02")))
        return super().batch(split, index)


class SlowPlot(SummaryAnalysis):
    """The grokking summary with a plot() that takes minutes: an analysis run to interrupt while it publishes."""

    NAME = "slowplot"

    def plot(self, results):
        print("plotting", file=sys.stderr, flush=True)
        time.sleep(300)
        return super().plot(results)
