"""What the trainer needs from a model library (ModelKind), and the model state one traced computation reads.

A trainer's state holds the model's trainable `params` and, apart from them, its `model_state`:
arrays the model carries that the optimizer must not touch (NNX batch statistics and RNG
counters, Equinox integer arrays); None when there are none (linen models, today). Inside a
traced computation the trainer opens a `binding` with the state it is stepping or evaluating,
and `bind_model` builds the callable model from params and that model state; a training step
reads the model state back from the module it bound.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["UNSET", "Binding", "ModelKind", "bind_model", "binding", "evaluating", "stepping"]


class ModelKind(Protocol):
    """One model definition as the trainer handles it: initial arrays, binding them, reading them back."""

    name: str  # the library, for messages: "flax.linen"

    def init_params(self, key: Any, inputs: Callable[[], tuple]) -> Any:
        """Freshly initialized trainable parameters (NNX and Equinox models were initialized when built)."""
        ...

    def init_model_state(self) -> Any:
        """The initial non-trainable arrays (None when the model has none)."""
        ...

    def bind(self, params: Any, model_state: Any, train: bool) -> Any:
        """The model as a callable holding these arrays, in training or evaluation mode."""
        ...

    def read_state(self, module: Any) -> Any:
        """The non-trainable arrays of a bound model after it was called (same structure as init_model_state)."""
        ...

    def params_of(self, module: Any) -> Any:
        """The trainable parameters a bound (or captured root) model holds, in the trainer's format."""
        ...


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass
class Binding:
    """The model state a traced computation reads, its mode, and the last (params, module) it bound."""

    model_state: Any
    train: bool
    bound: tuple[Any, Any] | None = None


_CURRENT: ContextVar[Binding | None] = ContextVar("lenscope_binding", default=None)


@contextlib.contextmanager
def binding(model_state: Any, *, train: bool) -> Iterator[Binding]:
    """Within the block, `bind_model` reads `model_state` and binds in training mode when `train`."""
    scope = Binding(model_state, train)
    token = _CURRENT.set(scope)
    try:
        yield scope
    finally:
        _CURRENT.reset(token)


def bind_model(kind: ModelKind, params: Any, model_state: Any = UNSET, train: bool | None = None) -> Any:
    """The callable model for `params`, with the binding's model state and mode unless given.

    Outside a binding: the definition's initial model state, evaluation mode. Within one, binding the
    same params again returns the same module, so a stateful model's updates accumulate.
    """
    scope = _CURRENT.get()
    if scope is not None and model_state is UNSET and train is None and scope.bound is not None \
            and scope.bound[0] is params:
        return scope.bound[1]
    if model_state is UNSET:
        model_state = scope.model_state if scope is not None else kind.init_model_state()
    if train is None:
        train = scope.train if scope is not None else False
    module = kind.bind(params, model_state, train)
    if scope is not None:
        scope.bound = (params, module)
    return module


def stepping(kind: ModelKind, loss: Callable[..., tuple[Any, Any]],
             model_state: Any) -> Callable[..., tuple[Any, tuple[Any, Any]]]:
    """`loss(params, batch, key)` in training mode on `model_state`: returns (loss, (aux, updated model state))."""
    @functools.wraps(loss)
    def stateful(params: Any, *args: Any) -> tuple[Any, tuple[Any, Any]]:
        with binding(model_state, train=True) as scope:
            value, aux = loss(params, *args)
        updated = kind.read_state(scope.bound[1]) if scope.bound is not None else model_state
        return value, (aux, updated)

    return stateful


def evaluating(step: Callable[..., Any]) -> Callable[..., Any]:
    """`step(params, *rest)` as f(params, model_state, *rest): evaluation mode on that model state."""
    @functools.wraps(step)
    def evaluate(params: Any, model_state: Any, *rest: Any) -> Any:
        with binding(model_state, train=False):
            return step(params, *rest)

    return evaluate
