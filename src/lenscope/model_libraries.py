"""The libraries lenscope may use without importing them: the model libraries and the optional extras.

Model libraries (flax.linen, flax.nnx, equinox): capture (its backends and TARGET), training (the model kinds)
and anything that publishes a model ask here which one a model or module is from. A model can only be an
nnx.Module or an eqx.Module if that library is imported already, and a linen job should not pay a third of a
second to import the others.

Optional extras (`pip install 'lenscope[EXTRA]'`): a command that needs one asks `optional()`, which names the
extra to install when it is missing. Whether a library is loaded at all (matplotlib for a figure, jax for an
array) is `imported_module()`. This is the one module that reads the interpreter's table of imported modules.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

from .errors import UsageError

__all__ = ["EQUINOX", "EXTRAS", "LIBRARIES", "LINEN", "NNX", "base_classes", "imported_module", "library_of",
           "loaded", "optional"]

LINEN, NNX, EQUINOX = "flax.linen", "flax.nnx", "equinox"
LIBRARIES = (LINEN, NNX, EQUINOX)  # in the order they are tried; each has a base class `Module`

# extra (pyproject.toml [project.optional-dependencies]) -> the packages lenscope imports from it, as pip names them
EXTRAS = {
    "export": ("tensorboard", "mlflow-skinny", "pypdfium2"),
    "postgres": ("psycopg",),
    "pretrained": ("tokenizers",),
    "sweep": ("optuna",),
    "ui": ("starlette", "uvicorn", "jinja2", "pypdfium2"),
}


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


def optional(module: str, extra: str, needed_for: str) -> ModuleType:
    """Import `module` of the optional extra `extra`, or raise a UsageError saying `needed_for` needs it and how
    to install it."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; the extras: {', '.join(sorted(EXTRAS))}")
    try:
        return importlib.import_module(module)
    except ImportError as err:
        packages = " ".join(EXTRAS[extra])
        raise UsageError(f"{needed_for} needs the {extra} extra: pip install 'lenscope[{extra}]' "
                         f"(or pip install {packages}) ({err})") from None
