"""Names of a package imported on first access (PEP 562 `__getattr__`), so importing the package loads no heavy
library it only sometimes needs."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(namespace: dict[str, Any], names: Mapping[str, str]) -> Callable[[str], Any]:
    """A `__getattr__` for the package whose `globals()` is `namespace`: each of `names` (name -> module, relative
    to the package) imported when first read, then kept in that namespace."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(names[name], package), name)
        return value

    return __getattr__
