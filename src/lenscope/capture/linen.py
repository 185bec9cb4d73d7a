"""The Flax linen backend: linen's own method interception (flax.linen.intercept_methods) reports every call."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import flax.linen as nn

from .backend import Interceptor, ModuleCall, Target
from .targets import target_classes

__all__ = ["LinenBackend", "module_path"]


def module_path(module: nn.Module) -> str:
    """The '/'-joined scope path of a bound module; the root module is ''."""
    return "/".join(str(part) for part in module.path)


class LinenBackend:
    """Capture for flax.linen models: a module call is intercepted with its bound module and scope path."""

    name = "flax.linen"

    def accepts(self, model: Any) -> bool:
        """A linen Module instance (the definition, bound or not)."""
        return isinstance(model, nn.Module)

    def check_target(self, target: Target = None) -> tuple[type, ...]:
        """TARGET's linen Module subclasses (None or a library base class: nn.Module, every module)."""
        return target_classes(target, nn.Module)

    @contextlib.contextmanager
    def intercept(self, on_call: Interceptor, root: Any = None) -> Iterator[None]:
        """Report each linen method call (inside any apply, this thread) to on_call while the block runs
        (paths are scope paths, so `root` is not needed)."""
        def interceptor(next_fun: Any, args: tuple, kwargs: dict, context: Any) -> Any:
            module = context.module
            path = module_path(module) if module.scope is not None else None
            call = ModuleCall(module, context.method_name, path, context.orig_method, args, kwargs)
            def proceed(new_args: tuple | None = None, new_kwargs: dict | None = None) -> Any:
                return next_fun(*(args if new_args is None else new_args),
                                **(kwargs if new_kwargs is None else new_kwargs))

            return on_call(call, proceed)

        with nn.intercept_methods(interceptor):
            yield

    def detach(self, module: nn.Module) -> nn.Module:
        """A copy of a bound module re-bound to its own variables, rngs and mutability; valid outside its apply."""
        scope = module.scope
        rngs = {}
        for name, rng in (scope.rngs or {}).items():
            # flax keeps rngs as LazyRng (a key plus a static suffix); as_jax_rng folds the suffix without consuming it
            rngs[name] = rng.as_jax_rng() if hasattr(rng, "as_jax_rng") else rng
        unbound, variables = module.unbind()
        return unbound.bind(variables, rngs=rngs or None, mutable=scope.mutable)

    def variables(self, module: nn.Module) -> Any:
        """The bound module's variable collections."""
        return module.variables

    def parameters(self, module: nn.Module) -> dict[str, Any]:
        """The bound module's own parameters (its `params` collection, not its submodules') by name."""
        return {name: value for name, value in module.variables.get("params", {}).items()
                if not isinstance(value, Mapping)}
