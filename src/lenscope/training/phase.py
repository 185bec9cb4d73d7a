"""The phase a trainer is in (train, test or analysis), visible to hooks, and the session-end hook of each."""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from typing import Any


class Phase(enum.Enum):
    """What the trainer is doing now: `trainer.phase` inside train(), test() and run_analysis(); None outside."""

    TRAIN = "train"
    TEST = "test"
    ANALYSIS = "analysis"


@contextlib.contextmanager
def session(trainer: Any, phase: Phase) -> Iterator[Phase]:
    """Set `trainer.phase` for the duration, then fire `on_<phase>_session_end()` once the outermost session of
    that phase ends (also after an error); the previous phase comes back afterwards."""
    previous = getattr(trainer, "phase", None)
    trainer.phase = phase
    try:
        yield phase
    finally:
        trainer.phase = previous
        if previous is not phase:
            getattr(trainer, f"on_{phase.value}_session_end")()
