"""The Equinox backend: Equinox has no method interception, so `__call__` is intercepted while a trace runs.

Equinox modules are immutable PyTrees: the forward rebuilds the model from its arrays inside the
traced function (as the trainer's `module()` does), the calls made while JAX traces are reported with
their paths, and a captured module is exactly the one that was called.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import equinox as eqx
import jax

from .backend import Interceptor, Target
from .interception import ClassInterception
from .targets import target_classes

__all__ = ["EquinoxBackend", "equinox_places"]


def equinox_places(root: eqx.Module) -> Iterator[tuple[str, eqx.Module]]:
    """(path, module) of `root` ('') and each submodule: field names, list indices and dict keys joined with '/'.

    A method of a module (`model.from_block`) is itself a module in Equinox, holding the module as `__self__`:
    called as the root, the paths are those of the module it is bound to.
    """
    owner = getattr(root, "__self__", None)
    if isinstance(owner, eqx.Module) and callable(getattr(root, "__func__", None)):
        yield "", root
        root = owner
    pending = [("", root)]
    while pending:
        path, module = pending.pop(0)
        yield path, module
        children, _ = jax.tree_util.tree_flatten_with_path(
            module, is_leaf=lambda x, parent=module: x is not parent and isinstance(x, eqx.Module))
        for keys, child in children:
            if isinstance(child, eqx.Module):
                name = jax.tree_util.keystr(keys, simple=True, separator="/")
                pending.append((f"{path}/{name}" if path else name, child))


class EquinoxBackend:
    """Capture for equinox models: calls intercepted by scoped `__call__` wrappers, paths from the PyTree."""

    name = "equinox"

    def __init__(self) -> None:
        self._interception = ClassInterception(eqx.Module, equinox_places)

    def accepts(self, model: Any) -> bool:
        """An equinox.Module instance."""
        return isinstance(model, eqx.Module)

    def check_target(self, target: Target = None) -> tuple[type, ...]:
        """TARGET's equinox.Module subclasses (None or a library base class: every module)."""
        return target_classes(target, eqx.Module)

    def intercept(self, on_call: Interceptor, root: Any = None) -> AbstractContextManager[None]:
        """Report each Equinox module `__call__` made in this thread to on_call while the block runs."""
        return self._interception.intercept(on_call, root)

    def detach(self, module: eqx.Module) -> eqx.Module:
        """The module itself: Equinox modules are immutable values."""
        return module

    def variables(self, module: eqx.Module) -> Any:
        """The module's arrays, as the module PyTree with every other leaf None."""
        return eqx.filter(module, eqx.is_array)

    def parameters(self, module: eqx.Module) -> dict[str, Any]:
        """The module's own floating-point array fields (not its submodules') by field name."""
        values = {f.name: getattr(module, f.name, None) for f in dataclasses.fields(module)}
        return {name: value for name, value in values.items() if eqx.is_inexact_array(value)}
