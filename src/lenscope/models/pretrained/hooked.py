"""`run_with_hooks`' pieces: TransformerLens-style hook functions `fn(activation, hook)` run in the forward, through
the model's interactive programs (capture.interactive): one program per meaning of the hooks, never a stale one,
and an eager answer while a new program compiles."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import equinox as eqx
import jax

from ...capture.equinox import EquinoxBackend
from ...capture.interactive import Interactive, is_traced
from ...capture.patch import patched, record
from ...capture.specs import signature
from ...errors import UsageError
from .activation_cache import select_hooks

__all__ = ["HookPoint", "HookSpec", "HookedPrograms", "hook_spec"]

HookSpec = tuple[tuple[str, tuple[Callable[..., Any], ...]], ...]  # (path, its hook functions in order), call order
BACKEND = EquinoxBackend()


@dataclass(frozen=True)
class HookPoint:
    """What a hook function gets beside the activation, as TransformerLens' `hook`: its dotted `name`, `layer()`,
    and `save(value)`, which returns a value computed in the hook with the call's result (`model.saved`)."""

    name: str
    _saved: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def layer(self) -> int | None:
        """The block index of a `blocks.L....` hook (None outside the blocks), as TransformerLens' `hook.layer()`."""
        parts = self.name.split(".")
        return int(parts[1]) if parts[0] == "blocks" and len(parts) > 1 and parts[1].isdigit() else None

    def save(self, value: Any, name: str | None = None) -> None:
        """Keep `value` (an array, or a tree of them) for after the call: `model.saved[name or hook.name]`."""
        self._saved[self.name if name is None else name] = value


def hook_spec(fwd_hooks: Sequence[tuple[Any, Callable[..., Any]]], hooks: Sequence[str]) -> HookSpec:
    """Each hook point `fwd_hooks` names (a name, glob, list or predicate of the dotted name) with its functions."""
    chosen: dict[str, list[Callable[..., Any]]] = {}
    for i, pair in enumerate(fwd_hooks):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and callable(pair[1])):
            raise UsageError(f"fwd_hooks[{i}]: expected a pair (name or filter, fn(activation, hook)), got {pair!r}")
        for path in select_hooks(hooks, pair[0]):
            chosen.setdefault(path, []).append(pair[1])
    return tuple((path, tuple(chosen[path])) for path in hooks if path in chosen)


class HookedPrograms:
    """A model's forwards with hooks (and recorded hook points): `run(spec, model, tokens, mask, recorded)`."""

    def __init__(self, kept: int, background: bool | None = None) -> None:
        self.programs = Interactive(kept, background)
        self._split: tuple[Any, Any, Any, Any, tuple] | None = None  # the last model's (model, arrays, static, ...)

    def _parts(self, model: Any) -> tuple[Any, Any, Any, tuple]:
        """(arrays, static part, its structure, the arrays' signature) of `model`, kept while the model is the same
        object (a Decoder is immutable: a changed model is a new object): a call need not flatten it again."""
        if self._split is None or self._split[0] is not model:
            arrays, static = eqx.partition(model, eqx.is_array)
            traced = is_traced(arrays)
            parts = (model, arrays, static, jax.tree_util.tree_structure(static), signature(arrays))
            if traced:  # inside a trace: nothing kept
                return parts[1], parts[2], parts[3], ()
            self._split = parts
        return self._split[1], self._split[2], self._split[3], self._split[4]

    def run(self, spec: HookSpec, model: Any, tokens: jax.Array, mask: jax.Array | None,
            recorded: tuple[str, ...] | None = None) -> tuple[Any, dict[str, Any]]:
        """(logits, or (logits, {path: activation as the hooks left it}) with `recorded`; what hooks saved)."""
        paths = tuple(path for path, _ in spec)
        counts = tuple(len(fns) for _, fns in spec)
        arrays, static, structure, arrays_signature = self._parts(model)

        def make(fns: Sequence[Callable[..., Any]]) -> Callable[..., Any]:
            def forward(arrays: Any, tokens: jax.Array, mask: jax.Array | None) -> tuple[Any, dict[str, Any]]:
                saved: dict[str, Any] = {}
                given = iter(fns)
                patch = {path: _chain(HookPoint(path.replace("/", "."), saved), tuple(next(given) for _ in range(n)))
                         for path, n in zip(paths, counts)}
                decoder = eqx.combine(arrays, static)

                def run(t: jax.Array, m: jax.Array | None) -> jax.Array:
                    return decoder(t, m)
                if recorded is None:
                    return patched(run, (tokens, mask), patch, backend=BACKEND), saved
                return record(run, (tokens, mask), list(recorded), patch, backend=BACKEND), saved
            return forward

        def warmup() -> jax.Array:  # the forward op by op: its operations compiled, for later hooks' eager answers
            return eqx.combine(arrays, static)(tokens, mask)

        context = (structure, paths, counts, recorded)
        hooks = [fn for _, fns in spec for fn in fns]
        if not arrays_signature or is_traced((tokens, mask)):
            return self.programs.call(make, hooks, (arrays, tokens, mask), context, warmup)
        return self.programs.call(make, hooks, (arrays, tokens, mask), context, warmup,
                                  args_signature=(arrays_signature, signature((tokens, mask))))


def _chain(point: HookPoint, fns: tuple[Callable[..., Any], ...]) -> Callable[[Any], Any]:
    def apply(x: Any) -> Any:
        for fn in fns:
            out = fn(x, point)
            x = x if out is None else out
        return x
    return apply
