"""The seam between capture and a model library: what discovery, capture and the Debugger need from it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from .inputs import DebugInputs

__all__ = ["CaptureBackend", "Interceptor", "ModuleCall", "Target"]

Target = type | str | tuple[type | str, ...] | None  # TARGET: module classes or their import paths; None: all


@dataclass(frozen=True)
class ModuleCall:
    """One intercepted call of a module method, as a backend reports it to capture."""

    module: Any  # as the library hands it (linen: bound, valid only inside its apply; see CaptureBackend.detach)
    method: str  # the method's name; "__call__" for a forward call
    path: str | None  # '/'-joined place in the model, the root is ''; None for a module with no place (unbound)
    function: Callable[..., Any]  # the method as called (no self): its signature names the arguments
    args: tuple
    kwargs: Mapping[str, Any]

    @property
    def forward(self) -> bool:
        """A `__call__` of a module that has a path: the calls discovery lists and capture may capture."""
        return self.method == "__call__" and self.path is not None

    def targets(self, kinds: tuple[type, ...]) -> bool:
        """A forward call of one of the (checked) TARGET classes."""
        return self.forward and isinstance(self.module, kinds)

    def inputs(self) -> DebugInputs:
        """The call's arguments bound by parameter name, defaults applied."""
        return DebugInputs.bind(self.function, self.args, self.kwargs)


# on_call(call, proceed): proceed() runs the intercepted call as given and returns its output;
# proceed(args, kwargs) runs it with replacement arguments instead (input patching, capture/patch.py).
Interceptor = Callable[[ModuleCall, Callable[[], Any]], Any]


class CaptureBackend(Protocol):
    """A model library as capture sees it: intercept module calls, detach a module, check TARGET.

    Implementations: LinenBackend (flax.linen's intercept_methods), NnxBackend and EquinoxBackend
    (`__call__` intercepted while a trace runs, capture/interception.py).
    """

    name: str  # what users write models with, for messages: "flax.linen"

    def accepts(self, model: Any) -> bool:
        """Whether `model` (a trainer's model definition) is one of this library's modules."""
        ...

    def check_target(self, target: Target) -> tuple[type, ...]:
        """TARGET as a nonempty tuple of this library's module classes (None: all); UsageError names a bad entry."""
        ...

    def intercept(self, on_call: Interceptor, root: Any = None) -> AbstractContextManager[None]:
        """While open, every module method call in this thread is reported to on_call, outermost first.

        `root`: the model whose places name the paths, for a forward that starts in another of its methods
        than `__call__` (capture.staged); by default the first module called is the root."""
        ...

    def detach(self, module: Any) -> Any:
        """A copy of a reported module that stays usable after the apply it was called in has returned."""
        ...

    def variables(self, module: Any) -> Any:
        """The module's arrays as a PyTree (the Debugger refuses traced ones)."""
        ...

    def parameters(self, module: Any) -> Mapping[str, Any]:
        """The module's own parameter arrays by name (`kernel`, `bias`), not its submodules': what ops read."""
        ...
