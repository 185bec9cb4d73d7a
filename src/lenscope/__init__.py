"""lenscope: see what a JAX model learns, with analyses that share the trainer's lifecycle.

The public names are listed once, as the imports of the stub `__init__.pyi` (what type checkers and
IDEs read); this module reads that file to import each name on first use, so `lenscope ls`/`show`/`get`
start without loading JAX, and derives `__all__` from it (tests/test_public_api.py checks both).

Op wrappers are also reachable here (`lenscope.activation_stats` is `lenscope.ops.activation_stats`),
looked up in the op registry on first access. They are not in `__all__`: the registry grows at run
time (`lenscope.ops.register`), and a name here (e.g. `Store`) always wins over an op of that name.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path
from typing import Any

from .version import VERSION

__version__ = VERSION

STUB = Path(__file__).with_suffix(".pyi")


def _exports(stub: Path = STUB) -> dict[str, str]:
    """{public name: the module it is imported from} as the stub's `from .x import name as name` lines say."""
    found = {}
    for node in ast.parse(stub.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            module = __name__ + (f".{node.module}" if node.module else "")
            found.update({alias.asname or alias.name: module for alias in node.names})
    return found


_EXPORTS = _exports()
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import a public name (or an op wrapper of lenscope.ops) on first access and cache it on the package."""
    if name in _EXPORTS:
        value = _load(_EXPORTS[name], name)
    elif _may_be_op(name) and name in _op_names():
        value = getattr(importlib.import_module(f"{__name__}.ops"), name)
    else:
        raise AttributeError(f"module 'lenscope' has no attribute {name!r} (public names: lenscope.__all__; "
                             "ops: dir(lenscope.ops))")
    globals()[name] = value
    return value


def _load(module: str, name: str) -> Any:
    """`name` of `module`: an attribute of it, or its submodule (`from .analysis import plots`, `from . import ops`)."""
    if module != __name__:
        found = getattr(importlib.import_module(module), name, None)
        if found is not None:
            return found
    return importlib.import_module(f"{module}.{name}")


def _may_be_op(name: str) -> bool:
    """Whether `name` could be an op: not private, and not a submodule (`from lenscope import capture` asks here
    first, before importing it)."""
    return name.isidentifier() and not name.startswith("_") and importlib.util.find_spec(f"lenscope.{name}") is None


def _op_names() -> list[str]:
    """The registered op names (imports the analysis layer: only asked for names lenscope itself lacks)."""
    return importlib.import_module("lenscope.analysis.op_registry").names()


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
