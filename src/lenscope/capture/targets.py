"""TARGET across model libraries: which module classes' calls a backend discovers."""

from __future__ import annotations

from ..errors import UsageError
from ..model_libraries import base_classes, imported_module
from .backend import Target

__all__ = ["library_bases", "target_classes"]

# A library's base class in TARGET means every module of whichever library the model is written with, so
# `TARGET = flax.linen.Module` (AnalysisBase's default) fits all. Only libraries already imported are looked at
# (model_libraries): a class of one that was never imported cannot be in TARGET or in the model.
_ANY = ("a module class (flax.linen, flax.nnx or equinox), its import path as a string ('pkg.module.Class'), "
        "or a nonempty tuple of them")


def library_bases() -> dict[type, str]:
    """{module base class: library name} of the model libraries imported in this process."""
    return base_classes()


def _named_class(path: str) -> type | None:
    """The class a TARGET string names, or None when its module was never imported (so no model can hold one)."""
    module_name, _, attribute = path.rpartition(".")
    if not module_name:
        raise UsageError(f"TARGET entry {path!r} is not an import path; expected {_ANY}")
    module = imported_module(module_name)
    if module is None:
        return None
    found = getattr(module, attribute, None)
    if not isinstance(found, type):
        raise UsageError(f"TARGET entry {path!r}: {module_name} has no class {attribute!r}; "
                         f"expected {_ANY}")
    return found


def target_classes(target: Target, base: type) -> tuple[type, ...]:
    """TARGET as the classes of `base`'s library it names (None or any library's base class: every module).

    A tuple may mix libraries, so one analysis can name its linen, NNX and Equinox counterparts; an entry may be a
    class's import path ('lenscope.models.nnx.Attention'), looked up only when its module is already imported, so
    naming another library's counterpart does not import that library. A TARGET naming no class of the model's
    library is a UsageError, as is an entry that is not a module class.
    """
    if target is None:
        return (base,)
    items = target if isinstance(target, tuple) else (target,)
    if not items:
        raise UsageError(f"TARGET must be {_ANY}, got ()")
    libraries = library_bases()
    classes = []
    for item in items:
        found = _named_class(item) if isinstance(item, str) else item
        if found is None:
            continue
        if not (isinstance(found, type) and issubclass(found, tuple(libraries))):
            raise UsageError(f"TARGET must be {_ANY}, got {item!r}")
        classes.append(found)
    if any(item in libraries for item in classes):
        return (base,)
    own = tuple(item for item in classes if issubclass(item, base))
    if not own:
        names = ", ".join(item if isinstance(item, str) else f"{item.__module__}.{item.__qualname__}"
                          for item in items)
        library = libraries[base]
        raise UsageError(f"TARGET ({names}) names no {library} module class, but the model is written "
                         f"with {library}; add its {library} counterpart to TARGET, or use None for "
                         "every module")
    return own
