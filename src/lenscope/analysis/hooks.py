"""The analysis hooks fire wherever they are written: on the trainer, on the analysis, or on both.

`fire(analysis, "on_analysis_start")` runs every definition of the hook once, in this order: the
trainer's (its class and bases, base classes first, called on the trainer), then those the analysis
class adds (called on the analysis). A standalone analysis is its own trainer, so a hook its trainer
class defines runs before the analysis's own; a borrowed view's trainer is the one it borrows from.
The no-op defaults on BaseTrainer are skipped. A definition may call `super()` or not: a `super()` call that
reaches a definition this firing already ran does nothing (training/hook_calls.py), so each runs once, base
classes first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..training.hook_calls import ANALYSIS_HOOKS, firing
from ..training.loop import TrainingLoop

HOOKS = ANALYSIS_HOOKS


def definitions(cls: type, name: str) -> list[Callable[..., Any]]:
    """The functions named `name` that `cls` and its bases define themselves, base classes first (defaults left out)."""
    default = TrainingLoop.__dict__[name]
    return [klass.__dict__[name] for klass in reversed(cls.__mro__)
            if name in klass.__dict__ and klass.__dict__[name] is not default]


def fire(analysis: Any, name: str, *args: Any) -> None:
    """Run hook `name` as the module docstring says: the trainer's definitions, then the analysis's own."""
    if name not in HOOKS:
        raise ValueError(f"{name!r} is not an analysis hook; hooks: {', '.join(HOOKS)}")
    trainer = analysis.holder.trainer or analysis
    done: set[Any] = set()
    with firing():  # a definition that a super() call already reached is skipped too
        for owner in (trainer, analysis):
            for function in definitions(type(owner), name):
                if function not in done:
                    done.add(function)
                    function(owner, *args)
