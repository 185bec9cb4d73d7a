"""A job silent for more than a few seconds says what it is doing: `announced` prints nothing for a quick phase, and
for a slow one a line naming it, then how long it took."""

from __future__ import annotations

import io
import time

from lenscope.training.progress import announced


def test_a_quick_phase_says_nothing():
    stream = io.StringIO()
    with announced("compiling the training step", after=5.0, stream=stream):
        pass
    assert stream.getvalue() == ""


def test_a_slow_phase_says_what_it_does_and_how_long_it_took():
    stream = io.StringIO()
    with announced("grokking.crosscoder: capturing activations of checkpoint x (1/4)", after=0.05, stream=stream):
        time.sleep(0.3)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "lenscope: grokking.crosscoder: capturing activations of checkpoint x (1/4)..."
    assert lines[1].startswith("lenscope: grokking.crosscoder: capturing activations of checkpoint x (1/4): ")
    assert lines[1].endswith(" s") and len(lines) == 2


def test_a_phase_that_fails_still_closes_its_line():
    stream = io.StringIO()
    try:
        with announced("validating at step 5", after=0.01, stream=stream):
            time.sleep(0.1)
            raise ValueError("boom")
    except ValueError:
        pass
    assert stream.getvalue().count("validating at step 5") == 2
