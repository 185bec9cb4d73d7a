"""Public API: one list of public names (the stub lenscope/__init__.pyi), `__all__` derived from it; docs import
only them."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import lenscope

ROOT = Path(__file__).resolve().parents[1]
# Modules a reader may import from (packages with an `__all__`, the op facade, the examples); the rest may move.
# lenscope.analysis is the seed-002 import path of the runner API.
PUBLIC_MODULES = re.compile(r"lenscope(\.(capture|config|store|models|ops|plots|dictionaries|attribution|"
                            r"analysis"
                            r"|examples(\.\w+)?"
                            r"|ui\.notebook))?\Z")  # the UI's pages in a notebook (docs/pretrained.md)


def _stub_imports() -> dict[str, str]:
    """name -> module of each import in the stub lenscope/__init__.pyi, read here independently of lenscope."""
    tree = ast.parse((Path(lenscope.__file__).parent / "__init__.pyi").read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module != "typing":
            assert node.level == 1, ast.unparse(node)
            module = "lenscope" + (f".{node.module}" if node.module else "")
            for alias in node.names:
                assert alias.asname == alias.name, f"re-export as `{alias.name} as {alias.name}`: {ast.unparse(node)}"
                found[alias.name] = module
        else:
            assert isinstance(node, (ast.Import, ast.ImportFrom, ast.AnnAssign, ast.FunctionDef)), ast.unparse(node)
    return found


TYPED = _stub_imports()


def test_all_is_derived_from_the_stub_the_one_list_of_public_names():
    assert lenscope.__all__ == sorted(set(lenscope.__all__)) == sorted(TYPED)
    assert lenscope._EXPORTS == TYPED
    assert "_MODULES" not in vars(lenscope)  # no second table
    source = Path(lenscope.__file__).read_text(encoding="utf-8")
    assert "TYPE_CHECKING" not in source  # no third list


@pytest.mark.parametrize("name", lenscope.__all__)
def test_each_public_name_resolves_to_the_object_type_checkers_see(name):
    module = importlib.import_module(TYPED[name])
    expected = getattr(module, name, None)
    if expected is None:  # `from .analysis import plots`: a submodule
        expected = importlib.import_module(f"{TYPED[name]}.{name}")
    assert getattr(lenscope, name) is expected
    assert name in dir(lenscope)


def _doc_imports() -> list[tuple[str, str, list[str]]]:
    """(file:line, module, names) of each `from lenscope... import` / `import lenscope...` in README and docs."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{lineno}"
            if match := re.match(r"\s*from (lenscope[\w.]*) import (.+)", line):
                names = [n.strip().split(" as ")[0] for n in match[2].strip("()").split(",") if n.strip()]
                found.append((where, match[1], names))
            elif match := re.match(r"\s*import (lenscope[\w.]*)", line):
                found.append((where, match[1], []))
    return found


def test_docs_and_readme_import_only_public_names():
    imports = _doc_imports()
    assert imports, "no lenscope imports found in README.md and docs/"
    private = [f"{where}: {module}" for where, module, _ in imports if not PUBLIC_MODULES.match(module)]
    assert not private, "docs import internal modules (use a name from `lenscope` instead):\n" + "\n".join(private)
    unknown = [f"{where}: {name}" for where, module, names in imports if module == "lenscope"
               for name in names if name not in lenscope.__all__]
    assert not unknown, "docs import names lenscope does not export:\n" + "\n".join(unknown)


def test_from_pretrained_is_documented_as_lenscope_models_from_pretrained_and_defined_once():
    import subprocess
    import sys

    from lenscope.models import from_pretrained
    from lenscope.models.pretrained import pretrained

    assert from_pretrained is lenscope.from_pretrained is pretrained.from_pretrained
    assert from_pretrained.__module__ == "lenscope.models.pretrained.pretrained"
    defined = [path for path in (ROOT / "src").rglob("*.py") if "def from_pretrained(" in path.read_text("utf-8")]
    assert defined == [ROOT / "src/lenscope/models/pretrained/pretrained.py"], defined
    docs = (ROOT / "docs" / "pretrained.md").read_text(encoding="utf-8")
    assert "from lenscope.models import from_pretrained" in docs and "from lenscope import from_pretrained" not in docs
    code = "import sys, lenscope.models; print('equinox' in sys.modules)"  # lazy: a linen job never loads Equinox
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_the_in_memory_results_and_the_lineage_store_have_distinct_names():
    assert {"AnalysisResults", "Store"} <= set(lenscope.__all__) and "AnalysisStore" not in lenscope.__all__
    assert lenscope.AnalysisResults.__module__ == "lenscope.analysis.batch"
    assert lenscope.Store.__module__ == "lenscope.store.store"
