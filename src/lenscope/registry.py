"""Job registry: `@job("name")` registers a class; `resolve()` finds one by name, module or file."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, TypeVar

from .errors import UsageError, hint

T = TypeVar("T", bound=type)

_JOBS: dict[str, type] = {}  # explicit registry: name -> job class
_BUILTIN_MODULES = ("lenscope.examples.grokking_analyses",)


def job(name: str):
    """Register a job class under `name` (e.g. "grokking/train")."""

    def register(cls: T) -> T:
        existing = _JOBS.get(name)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise UsageError(f"job name {name!r} is taken by {existing.__module__}.{existing.__qualname__}")
        _JOBS[name] = cls
        cls.JOB_NAME = name
        return cls

    return register


def load_builtins() -> None:
    """Import the packaged example modules so their jobs are registered."""
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def jobs() -> dict[str, type]:
    """All registered jobs, built-ins included, sorted by name."""
    load_builtins()
    return dict(sorted(_JOBS.items()))


def job_name(cls: type) -> str:
    """The registered name of a job class, else its dotted path."""
    return getattr(cls, "JOB_NAME", None) or f"{cls.__module__}:{cls.__qualname__}"


def _from_file(path: str, attr: str) -> Any:
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"job file {path!r} does not exist")
    mod_name = f"lenscope_user_{abs(hash(file.resolve()))}"
    spec = importlib.util.spec_from_file_location(mod_name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    return _attr(module, attr, path)


def _attr(module: Any, attr: str, where: str) -> Any:
    try:
        return getattr(module, attr)
    except AttributeError:
        names = [n for n in dir(module) if isinstance(getattr(module, n), type)]
        raise UsageError(f"{where} has no class {attr!r}{hint(attr, names)}") from None


def resolve(spec: str | type) -> type:
    """The job class for a registered name, `package.module:Class` or `path/file.py:Class`."""
    if isinstance(spec, type):
        return spec
    registered = jobs()
    if spec in registered:
        return registered[spec]
    if ":" in spec:
        where, attr = spec.rsplit(":", 1)
        if where.endswith(".py"):
            return _from_file(where, attr)
        try:
            module = importlib.import_module(where)
        except ImportError as err:
            raise UsageError(f"cannot import job module {where!r}: {err}") from None
        return _attr(module, attr, where)
    raise UsageError(
        f"unknown job {spec!r}{hint(spec, registered)}; registered jobs: {', '.join(registered) or '(none)'}"
        " (or give package.module:Class or path/to/file.py:Class)"
    )
