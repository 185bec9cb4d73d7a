"""A grokking trainer that, with $HELD_GROK_AT set, stops before that training batch until it is killed.

A test starts it, waits for a checkpoint it has written, and kills it while it is held a few steps further on;
without the variable it is grokking/train, numerics unchanged.
"""

import os
import time

from lenscope.examples.grokking import GrokTrainer


class HeldGrok(GrokTrainer):
    """Sleeps for good before training batch $HELD_GROK_AT (outside any trace); unset, it never sleeps."""

    def batch(self, split, index=0):
        held = os.environ.get("HELD_GROK_AT")
        if held and split == "train" and index >= int(held):
            time.sleep(3600)  # killed here by the test
        return super().batch(split, index)
