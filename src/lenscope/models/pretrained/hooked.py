"""`run_with_hooks`' pieces: TransformerLens-style hook functions `fn(activation, hook)` compiled into the forward,
and the model's kept programs, one per choice of hooks (and of hook points recorded with them)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import equinox as eqx

from ...capture.equinox import EquinoxBackend
from ...capture.patch import patched, record
from ...errors import UsageError
from .activation_cache import select_hooks

__all__ = ["HookPoint", "HookSpec", "HookedPrograms", "hook_spec", "hooked_forward"]

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


def hooked_forward(spec: HookSpec, recorded: tuple[str, ...] | None = None) -> Any:
    """A compiled forward with `spec`'s hook functions applied where they sit (a hook returning None: unchanged);
    with `recorded`, it returns (logits, {path: activation}) too, each as the hooks left it."""
    patch = {path: _chain(HookPoint(path.replace("/", ".")), fns) for path, fns in spec}
    if recorded is None:
        return eqx.filter_jit(lambda model, tokens, mask: patched(lambda t, m: model(t, m), (tokens, mask), patch,
                                                                  backend=EquinoxBackend()))
    return eqx.filter_jit(lambda model, tokens, mask: record(lambda t, m: model(t, m), (tokens, mask),
                                                             list(recorded), patch, backend=EquinoxBackend()))


class HookedPrograms:
    """The compiled forwards of the last `kept` choices of (hooks, recorded hook points or None), least recent
    dropped first: a hook function defined once reuses its program; a new lambda per call compiles per call."""

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self._programs: OrderedDict[tuple[HookSpec, tuple[str, ...] | None], Any] = OrderedDict()

    def get(self, spec: HookSpec, recorded: tuple[str, ...] | None = None) -> Any:
        key = (spec, recorded)
        if key not in self._programs:
            self._programs[key] = hooked_forward(spec, recorded)
            while len(self._programs) > self.kept:
                self._programs.popitem(last=False)
        self._programs.move_to_end(key)
        return self._programs[key]


def _chain(point: HookPoint, fns: tuple[Callable[..., Any], ...]) -> Callable[[Any], Any]:
    def apply(x: Any) -> Any:
        for fn in fns:
            out = fn(x, point)
            x = x if out is None else out
        return x
    return apply
