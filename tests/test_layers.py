"""The architecture holds: import-linter's layer and no-cycle contracts, and no hidden function-local imports."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "lenscope"
LAZY = "# lazy:"


def _lint_imports() -> str:
    beside = Path(sys.executable).with_name("lint-imports")
    found = str(beside) if beside.exists() else shutil.which("lint-imports")
    if found is None:
        pytest.fail("lint-imports is not installed: pip install -e '.[test]'")
    return found


def test_import_contracts_hold():
    """Layers import only downward and no lenscope modules import each other in a cycle (pyproject.toml)."""
    done = subprocess.run([_lint_imports(), "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def _local_imports(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each import statement inside a function body of the module at `path`."""
    text = path.read_text(encoding="utf-8")
    found = []
    for scope in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            found += [(node.lineno, ast.unparse(node)) for node in ast.walk(scope)
                      if isinstance(node, (ast.Import, ast.ImportFrom))]
    return sorted(set(found))


def _unexplained(path: Path, root: Path = ROOT) -> list[str]:
    """The function-local imports of `path` without a `# lazy: why` comment on their line or the line above."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for lineno, statement in _local_imports(path):
        here, above = lines[lineno - 1], lines[lineno - 2] if lineno > 1 else ""
        if LAZY not in here and not above.lstrip().startswith(LAZY):
            out.append(f"{path.relative_to(root)}:{lineno}: {statement}")
    return out


def test_function_local_imports_say_why_they_are_lazy():
    """Only deliberately lazy heavy imports live inside functions, each with a one-line `# lazy: why` comment."""
    bad = [line for path in sorted(SOURCE.rglob("*.py")) for line in _unexplained(path)]
    assert not bad, "function-local imports without a '# lazy: why' comment (import at module level instead):\n" + \
        "\n".join(bad)


def test_the_local_import_check_sees_nested_and_commented_imports(tmp_path):
    """The checker itself: a nested import is found; a `# lazy:` comment above or beside it excuses it."""
    module = tmp_path / "m.py"
    module.write_text(
        "import os\n"
        "def f():\n"
        "    def g():\n"
        "        import json\n"
        "    # lazy: pyarrow is heavy and only this cold path needs it\n"
        "    import pyarrow\n"
        "    import yaml  # lazy: read once, on a cold path\n"
        "    from . import x\n",
        encoding="utf-8",
    )
    assert _unexplained(module, tmp_path) == ["m.py:4: import json", "m.py:8: from . import x"]


def test_the_command_line_starts_without_jax():
    """`lenscope ls/show/get/fsck/ui` answer in a fraction of a second: the CLI imports JAX only to run a job."""
    heavy = "('jax', 'flax', 'equinox', 'matplotlib')"
    probe = f"import sys, lenscope.cli; print(sorted(m for m in {heavy} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "[]"
