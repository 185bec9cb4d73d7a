"""The analysis hooks' definitions each run once per firing, whether or not an override calls `super()`.

Every trainer class's own definitions of the analysis hooks are wrapped when the class is made
(`TrainingLoop.__init_subclass__`). Inside `firing()` a wrapped definition that already ran does nothing
when called again, so a `super()` call reaching a definition the firing ran before is a no-op; outside
it (a hook called directly) a wrapped definition is the plain function.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

ANALYSIS_HOOKS = ("on_analysis_start", "on_analysis_epoch_end", "on_analysis_end")

# The wrapped definitions run by the firing in progress in this thread (or task); None outside a firing.
_ran: ContextVar[set[Callable[..., Any]] | None] = ContextVar("lenscope_hooks_ran", default=None)


def once(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` as a hook definition that runs at most once per firing."""

    @functools.wraps(function)
    def hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        ran = _ran.get()
        if ran is not None:
            if hook in ran:
                return None
            ran.add(hook)
        return function(self, *args, **kwargs)

    hook.__lenscope_once__ = True  # type: ignore[attr-defined]
    return hook


def wrap_hooks(cls: type) -> None:
    """Wrap the analysis hooks `cls` defines itself (plain functions only) with `once`."""
    for name in ANALYSIS_HOOKS:
        function = cls.__dict__.get(name)
        if inspect.isfunction(function) and not getattr(function, "__lenscope_once__", False):
            setattr(cls, name, once(function))


@contextlib.contextmanager
def firing() -> Iterator[None]:
    """One firing of a hook: each wrapped definition called inside runs at most once."""
    token = _ran.set(set())
    try:
        yield
    finally:
        _ran.reset(token)
