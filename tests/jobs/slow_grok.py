"""A grokking trainer slowed down on the host side, so a test can kill it mid-run."""

import time

from lenscope.examples.grokking import GrokTrainer


class SlowGrok(GrokTrainer):
    """Sleeps a little before each batch (outside any trace); numerics are unchanged."""

    def batch(self, split, index=0):
        time.sleep(0.02)
        return super().batch(split, index)
