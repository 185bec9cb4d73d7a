"""The Flax NNX backend: NNX has no method interception, so `__call__` is intercepted while a trace runs.

Capture keeps everything inside one jit: the forward merges the model from its state inside the
traced function (`nnx.merge`, as the trainer's `module()` does), the module calls made while JAX
traces are reported with their paths, and the captured modules are the merged ones, valid for the
rest of the trace, so `analyze` can call them on their captured inputs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

from flax import nnx

from .backend import Interceptor, Target
from .interception import ClassInterception
from .targets import target_classes

__all__ = ["NnxBackend", "nnx_places"]


def nnx_places(root: nnx.Module) -> Iterator[tuple[str, nnx.Module]]:
    """(path, module) of `root` ('') and each submodule: attribute names and list indices joined with '/'."""
    for parts, module in nnx.iter_modules(root):
        yield "/".join(str(part) for part in parts), module


class NnxBackend:
    """Capture for flax.nnx models: calls intercepted by scoped `__call__` wrappers, paths from the module graph."""

    name = "flax.nnx"

    def __init__(self) -> None:
        self._interception = ClassInterception(nnx.Module, nnx_places)

    def accepts(self, model: Any) -> bool:
        """An nnx.Module instance."""
        return isinstance(model, nnx.Module)

    def check_target(self, target: Target = None) -> tuple[type, ...]:
        """TARGET's nnx.Module subclasses (None or a library base class: every module)."""
        return target_classes(target, nnx.Module)

    def intercept(self, on_call: Interceptor, root: Any = None) -> AbstractContextManager[None]:
        """Report each NNX module `__call__` made in this thread to on_call while the block runs."""
        return self._interception.intercept(on_call, root)

    def detach(self, module: nnx.Module) -> nnx.Module:
        """The module itself: an NNX module is an object that stays valid after its call."""
        return module

    def variables(self, module: nnx.Module) -> Any:
        """The module's NNX state (parameters, batch statistics, RNG state), as a PyTree."""
        return nnx.state(module)

    def parameters(self, module: nnx.Module) -> dict[str, Any]:
        """The module's own parameters (nnx.Param attributes, not its submodules') by attribute name."""
        return {name: value.get_value() for name, value in vars(module).items() if isinstance(value, nnx.Param)}
