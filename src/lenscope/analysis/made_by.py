"""What an analysis leaves besides its file: the code that made it (provenance) and its JSON numbers as values (E2)."""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..job_registry import module_label
from ..store.values import MAX_KEY
from ..version import VERSION

MAX_VALUES = 256  # scalar leaves recorded per result; a bigger JSON result is data, not a handful of numbers
PREFIX = "analysis"


@functools.cache
def provenance(cls: type) -> dict[str, Any]:
    """The class's qualified name, its source file, the SHA-256 of its source and the lenscope version."""
    made: dict[str, Any] = {"class": f"{module_label(cls.__module__)}.{cls.__qualname__}", "lenscope": VERSION}
    file = _source_file(cls)
    if file:
        made["source_file"] = str(Path(file).resolve())
    try:
        source = inspect.getsource(cls).encode()
    except (OSError, TypeError):
        source = Path(file).read_bytes() if file and Path(file).is_file() else None
    if source is not None:
        made["source_sha256"] = hashlib.sha256(source).hexdigest()
    return made


def _source_file(cls: type) -> str | None:
    """The file that defines `cls`, also for a module run from a path and not imported (`runpy`)."""
    try:
        return inspect.getsourcefile(cls)
    except TypeError:  # not an imported module (defined interactively, or run by runpy): ask its functions
        codes = (getattr(inspect.unwrap(value), "__code__", None) for value in vars(cls).values()
                 if inspect.isfunction(value))
        return next((code.co_filename for code in codes if code is not None and Path(code.co_filename).is_file()),
                    None)


def naming_class(cls: type) -> type:
    """The class that names the analysis (defines NAME), not a trainer it was combined with."""
    return next((c for c in cls.__mro__ if "NAME" in c.__dict__), cls)


def _scalar(value: Any) -> Any:
    """A JSON leaf as a value, or a marker that it is not a scalar (lists, dicts, non-finite floats are kept)."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return _NOT


_NOT = object()


def json_values(name: str, output: Any, limit: int = MAX_VALUES) -> dict[str, Any]:
    """`{"analysis/NAME/key/sub": leaf}` for the scalar leaves of a JSON result (nested dicts joined by `/`).

    Lists are left out (their items are data, not named numbers), and so are leaves whose key would pass the
    store's value-key limit (a long NAME's result still publishes); a result with more than `limit` scalar
    leaves records none: it is a data set, read from its file.
    """
    if not isinstance(output, Mapping):
        value = _scalar(output)
        key = f"{PREFIX}/{name}"
        return {} if value is _NOT or isinstance(output, (list, tuple)) or len(key) > MAX_KEY else {key: value}
    out: dict[str, Any] = {}

    def walk(tree: Mapping, path: str) -> None:
        for key, value in tree.items():
            here = f"{path}/{key}"
            if isinstance(value, Mapping):
                walk(value, here)
                continue
            leaf = _scalar(value)
            if leaf is not _NOT and len(here) <= MAX_KEY:
                out[here] = leaf

    walk(output, f"{PREFIX}/{name}")
    return out if len(out) <= limit else {}
