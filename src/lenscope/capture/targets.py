"""TARGET across model libraries: which module classes' calls a backend discovers."""

from __future__ import annotations

import equinox as eqx
import flax.linen as nn
from flax import nnx

from ..errors import UsageError
from .backend import Target

__all__ = ["LIBRARIES", "target_classes"]

# Each library's module base class and its name in messages. A base class in TARGET means every module of
# whichever library the model is written with, so `TARGET = flax.linen.Module` (AnalysisBase's default) fits all.
LIBRARIES: dict[type, str] = {nn.Module: "flax.linen", nnx.Module: "flax.nnx", eqx.Module: "equinox"}
_ANY = "a module class (flax.linen, flax.nnx or equinox) or a nonempty tuple of them"


def target_classes(target: Target, base: type) -> tuple[type, ...]:
    """TARGET as the classes of `base`'s library it names (None or any library's base class: every module).

    A tuple may mix libraries, so one analysis can name its linen, NNX and Equinox counterparts; a TARGET
    naming no class of the model's library is a UsageError, as is an entry that is not a module class.
    """
    if target is None:
        return (base,)
    items = target if isinstance(target, tuple) else (target,)
    if not items:
        raise UsageError(f"TARGET must be {_ANY}, got ()")
    for item in items:
        if not (isinstance(item, type) and issubclass(item, tuple(LIBRARIES))):
            raise UsageError(f"TARGET must be {_ANY}, got {item!r}")
    if any(item in LIBRARIES for item in items):
        return (base,)
    own = tuple(item for item in items if issubclass(item, base))
    if not own:
        names = ", ".join(f"{item.__module__}.{item.__qualname__}" for item in items)
        raise UsageError(f"TARGET ({names}) names no {LIBRARIES[base]} module class, but the model is written "
                         f"with {LIBRARIES[base]}; add its {LIBRARIES[base]} counterpart to TARGET, or use None for "
                         "every module")
    return own
