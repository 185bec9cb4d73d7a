"""A grokking SAE trainer slowed down on the host side, so a test can kill it mid-run."""

import os
import time

from lenscope.examples.grokking_sae import GrokSae


class SlowSae(GrokSae):
    """Sleeps $SLOW_SAE_S seconds (default 0.05) before each batch, outside any trace; numerics are unchanged."""

    def batch(self, split, index=0):
        time.sleep(float(os.environ.get("SLOW_SAE_S", "0.05")))
        return super().batch(split, index)
