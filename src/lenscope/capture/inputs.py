"""DebugInputs: a captured module call's arguments, bound by parameter name with defaults applied."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax

from ..errors import UsageError, hint

_P = inspect.Parameter
# Parameter kinds stored as small ints so the pytree aux data stays hashable and cheap to compare.
_KINDS = {
    _P.POSITIONAL_ONLY: 0,
    _P.POSITIONAL_OR_KEYWORD: 1,
    _P.VAR_POSITIONAL: 2,
    _P.KEYWORD_ONLY: 3,
    _P.VAR_KEYWORD: 4,
}


def _describe(value: Any) -> str:
    """A short 'f32[2,8]'-style description of one argument, for repr."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{getattr(dtype, 'name', dtype)}[{','.join(str(d) for d in shape)}]"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(_describe(v) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_describe(v)}" for k, v in value.items()) + "}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@jax.tree_util.register_pytree_with_keys_class
class DebugInputs(Mapping[str, Any]):
    """The arguments of one captured call, by parameter name (defaults applied); read-only mapping."""

    __slots__ = ("_values", "_kinds", "__weakref__")

    def __init__(self, values: Mapping[str, Any], kinds: Mapping[str, int] | None = None):
        object.__setattr__(self, "_values", dict(values))
        kinds = dict(kinds or {})
        object.__setattr__(self, "_kinds", {name: kinds.get(name, 1) for name in self._values})

    @classmethod
    def bind(cls, method: Callable[..., Any], args: tuple, kwargs: Mapping[str, Any]) -> DebugInputs:
        """Bind `args`/`kwargs` to `method`'s signature (bound method or partial: no self) and apply defaults."""
        signature = inspect.signature(method)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        kinds = {name: _KINDS[signature.parameters[name].kind] for name in bound.arguments}
        return cls(bound.arguments, kinds)

    def __getitem__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(f"{name!r}: no such argument; have {list(self._values)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(f"DebugInputs has no argument {name!r}{hint(name, values)}; have {list(values)}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("DebugInputs is read-only; use .replace(name=value) for a modified copy")

    def __repr__(self) -> str:
        items = ", ".join(f"{k}: {_describe(v)}" for k, v in self._values.items())
        return f"DebugInputs({items})"

    def replace(self, **changes: Any) -> DebugInputs:
        """A copy with some arguments replaced, e.g. to re-run a layer on ablated inputs."""
        unknown = [k for k in changes if k not in self._values]
        if unknown:
            raise UsageError(
                f"DebugInputs.replace: unknown argument {unknown[0]!r}{hint(unknown[0], self._values)}; "
                f"have {list(self._values)}"
            )
        return DebugInputs({**self._values, **changes}, self._kinds)

    def args_kwargs(self) -> tuple[tuple, dict[str, Any]]:
        """The (args, kwargs) that reproduce the call, honouring positional-only and variadic parameters."""
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for name, value in self._values.items():
            kind = self._kinds[name]
            if kind in (0, 1):
                args.append(value)
            elif kind == 2:
                args.extend(value)
            elif kind == 3:
                kwargs[name] = value
            else:
                kwargs.update(value)
        return tuple(args), kwargs

    def call(self, layer: Callable[..., Any], **overrides: Any) -> Any:
        """Call `layer` with these arguments (optionally some replaced): `layer(**inputs)` that also handles *args."""
        inputs = self.replace(**overrides) if overrides else self
        args, kwargs = inputs.args_kwargs()
        return layer(*args, **kwargs)

    def tree_flatten_with_keys(self):
        """Pytree protocol: argument values are children, names and kinds are static."""
        children = tuple((jax.tree_util.DictKey(k), v) for k, v in self._values.items())
        return children, tuple(self._kinds.items())

    @classmethod
    def tree_unflatten(cls, aux: tuple, children: tuple) -> DebugInputs:
        """Pytree protocol: rebuild from static (name, kind) pairs and values."""
        kinds = dict(aux)
        return cls(dict(zip(kinds, children, strict=True)), kinds)
