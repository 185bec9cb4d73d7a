"""`run_with_hooks`' pieces: TransformerLens-style hook functions `fn(activation, hook)` compiled into the forward."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import equinox as eqx

from ...capture.equinox import EquinoxBackend
from ...capture.patch import patched
from ...errors import UsageError
from .activation_cache import select_hooks

__all__ = ["HookPoint", "HookSpec", "hook_spec", "hooked_forward"]

HookSpec = tuple[tuple[str, tuple[Callable[..., Any], ...]], ...]  # (path, its hook functions in order), call order


@dataclass(frozen=True)
class HookPoint:
    """What a hook function gets beside the activation, as TransformerLens' `hook`: its dotted `name`."""

    name: str

    @property
    def layer(self) -> int | None:
        """The block index of a `blocks.L....` hook (None outside the blocks)."""
        parts = self.name.split(".")
        return int(parts[1]) if parts[0] == "blocks" and len(parts) > 1 and parts[1].isdigit() else None


def hook_spec(fwd_hooks: Sequence[tuple[Any, Callable[..., Any]]], hooks: Sequence[str]) -> HookSpec:
    """Each hook point `fwd_hooks` names (a name, glob, list or predicate of the dotted name) with its functions."""
    chosen: dict[str, list[Callable[..., Any]]] = {}
    for i, pair in enumerate(fwd_hooks):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and callable(pair[1])):
            raise UsageError(f"fwd_hooks[{i}]: expected a pair (name or filter, fn(activation, hook)), got {pair!r}")
        for path in select_hooks(hooks, pair[0]):
            chosen.setdefault(path, []).append(pair[1])
    return tuple((path, tuple(chosen[path])) for path in hooks if path in chosen)


def hooked_forward(spec: HookSpec) -> Any:
    """A compiled forward with `spec`'s hook functions applied where they sit (a hook returning None: unchanged)."""
    patch = {path: _chain(HookPoint(path.replace("/", ".")), fns) for path, fns in spec}
    return eqx.filter_jit(lambda model, tokens, mask: patched(lambda t, m: model(t, m), (tokens, mask), patch,
                                                              backend=EquinoxBackend()))


def _chain(point: HookPoint, fns: tuple[Callable[..., Any], ...]) -> Callable[[Any], Any]:
    def apply(x: Any) -> Any:
        for fn in fns:
            out = fn(x, point)
            x = x if out is None else out
        return x
    return apply
