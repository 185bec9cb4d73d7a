"""The model libraries lenscope supports (flax.linen, flax.nnx, equinox) and which one a model or module is from.

Capture (its backends and TARGET), training (the model kinds) and anything that publishes a model ask here. It
is the one place that looks a library up in sys.modules: a model can only be an nnx.Module or an eqx.Module if
that library is imported already, and a linen job should not pay a third of a second to import the others.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

__all__ = ["EQUINOX", "LIBRARIES", "LINEN", "NNX", "base_classes", "imported_module", "library_of", "loaded"]

LINEN, NNX, EQUINOX = "flax.linen", "flax.nnx", "equinox"
LIBRARIES = (LINEN, NNX, EQUINOX)  # in the order they are tried; each has a base class `Module`


def loaded(library: str) -> bool:
    """Whether `library` (one of LIBRARIES) is imported in this process."""
    return imported_module(library) is not None


def base_classes() -> dict[type, str]:
    """{module base class: library} of the supported libraries imported in this process."""
    return {imported_module(name).Module: name for name in LIBRARIES if loaded(name)}


def library_of(model: Any) -> str | None:
    """The library whose Module `model` is (an instance, or with a class, a subclass), else None."""
    for base, name in base_classes().items():
        if isinstance(model, base) or (isinstance(model, type) and issubclass(model, base)):
            return name
    return None


def imported_module(name: str) -> ModuleType | None:
    """The module `name` if it is imported already, else None (nothing is imported here).

    A class of a module nobody imported cannot be in a model, so a TARGET naming another library's
    counterpart ('lenscope.models.nnx.Attention') never imports that library.
    """
    return sys.modules.get(name)
