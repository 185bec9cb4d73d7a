"""A signal that lands inside a garbage-collection callback: no traceback printed, raised at the next check."""

from __future__ import annotations

import gc
import os
import signal
import sys

import pytest

from lenscope.training.interrupts import Interrupted, check, on_signals


def test_a_signal_inside_a_gc_callback_is_quiet_and_raised_at_the_next_check(monkeypatch):
    landed, unraisable = [], []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)  # what Python would print as a traceback

    def callback(phase: str, _info: dict) -> None:
        if phase == "start" and not landed:
            landed.append(True)
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # bytecodes for the handler to run on, here inside the callback
                pass

    with on_signals():
        gc.callbacks.append(callback)
        try:
            gc.collect()
        finally:
            gc.callbacks.remove(callback)
        assert landed
        with pytest.raises(Interrupted):
            check()
    assert unraisable == []
    assert sys.unraisablehook == unraisable.append  # restored on the way out
