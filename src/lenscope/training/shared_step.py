"""The training step compiled once per program, not once per trainer: trainers of one class, one --base node and one
config (but for the paths that cannot change the step) share one jitted step and so its compiled programs. A class
opts in with `SHARED_STEP = True` when its step reads nothing else (the built-in trainers do).

`jax.jit(self.train_step)` is a new function for every trainer, so a second trainer of the same model and loss in
one process (a notebook cell run again, a resumed run, a test's second job) traced and compiled its step again. Here
the step is one jitted function per key with the trainer as a static argument that compares by the key and holds
its trainer weakly: an equal trainer finds the compiled program, a new shape traces the calling trainer's own step,
and a cached program keeps no trainer alive. The registry keeps the last `SIZE` keys; an evicted step's programs
are freed with the last trainer holding it.
"""

from __future__ import annotations

import json
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import jax

from ..config import to_dict

SIZE = 8  # step keys kept (each with the programs its shapes compiled)
UNUSED = ("logging", "store")  # config sections the step never reads: cadences, results folder, store URL
UNUSED_PATHS = ("training/analyze", "training/analyses", "training/analyze_strict", "training/analysis_other_class",
                "training/analysis_deadline")  # the tandem analyses run outside the step


def step_key(trainer: Any) -> Hashable:
    """The trainer's class, its --base node and its config without the sections and paths the step never reads."""
    config = {k: v for k, v in to_dict(trainer.args).items() if k not in UNUSED}
    for path in UNUSED_PATHS:
        section, name = path.split("/")
        config.get(section, {}).pop(name, None)
    return type(trainer), str(getattr(trainer, "base", None)), json.dumps(config, sort_keys=True, default=str)


class _Owner:
    """The step's static argument: equal for equal keys; its trainer held weakly."""

    __slots__ = ("key", "trainer")

    def __init__(self, key: Hashable, trainer: Any) -> None:
        self.key, self.trainer = key, weakref.ref(trainer)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Owner) and self.key == other.key


def _jitted_step() -> Callable:
    """A new jitted step function: JAX caches compiled programs per Python function, so each key gets its own."""

    def train_step(owner: _Owner, state: Any, batch: Any) -> Any:  # named as the method: --debug lists it so
        return owner.trainer().train_step(state, batch)

    return jax.jit(train_step, static_argnums=0, donate_argnums=1)


class SharedStep:
    """One trainer's handle on its key's jitted step: called as `step(state, batch)`, the state donated."""

    def __init__(self, jitted: Callable, owner: _Owner) -> None:
        self.jitted, self._owner = jitted, owner

    def __call__(self, state: Any, batch: Any) -> Any:
        return self.jitted(self._owner, state, batch)


class SharedSteps:
    """An explicit registry: the jitted training step of each of the last SIZE step keys."""

    def __init__(self, size: int = SIZE) -> None:
        self.size = size
        self._jitted: OrderedDict[Hashable, Callable] = OrderedDict()

    def step(self, trainer: Any) -> SharedStep:
        """`trainer`'s training step: the jitted step of its key, made if this key is new (or was evicted)."""
        key = step_key(trainer)
        jitted = self._jitted.pop(key, None) or _jitted_step()
        self._jitted[key] = jitted
        while len(self._jitted) > self.size:
            self._jitted.popitem(last=False)
        return SharedStep(jitted, _Owner(key, trainer))


STEPS = SharedSteps()
