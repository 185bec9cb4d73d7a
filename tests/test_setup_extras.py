"""`make setup` installs what the docs' tested sessions use: every module a docs test would skip without comes from an
extra the Makefile installs, so a user who followed the README runs each doc without `pip install 'lenscope[...]'`."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def setup_extras() -> list[str]:
    """The extras `make setup` installs, read from the Makefile (SETUP_EXTRAS or the literal `.[...]`)."""
    makefile = (REPO / "Makefile").read_text()
    install = re.search(r"^\t\$\(BIN\)/python -m pip install -q -e '\.\[([^\]]+)\]'$", makefile, re.M).group(1)
    if install == "$(SETUP_EXTRAS)":
        install = re.search(r"^SETUP_EXTRAS := (.+)$", makefile, re.M).group(1)
    return [extra.strip() for extra in install.split(",")]


def installed_distributions(extras: list[str]) -> set[str]:
    """The distributions those extras require (with the extras they name, e.g. `lenscope[ui]`, followed)."""
    optional = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names: set[str] = set()
    todo = list(extras)
    while todo:
        for requirement in optional[todo.pop()]:
            name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)
            names.add(_canonical(name))
            inner = re.match(r"lenscope\[([^\]]+)\]", requirement)
            todo += inner.group(1).split(",") if inner else []
    return names


def docs_test_modules() -> dict[str, str]:
    """Module -> the docs test that skips without it (`pytest.importorskip("MODULE"...)`)."""
    found = {}
    for test in sorted((REPO / "tests").glob("test_docs_*.py")) + [REPO / "tests" / "test_readme.py"]:
        for module in re.findall(r"importorskip\(\s*[\"']([\w.]+)[\"']", test.read_text()):
            found[module.split(".")[0]] = test.name
    return found


def test_make_setup_installs_every_module_the_docs_tests_need():
    installed = installed_distributions(setup_extras())
    providers = packages_distributions()
    needed = docs_test_modules()
    assert {"optuna", "tensorboard", "mlflow", "tokenizers"} <= set(needed)  # the scan finds what the docs use
    missing = {module: test for module, test in needed.items()
               if not {_canonical(d) for d in providers.get(module, [module])} & installed}
    assert not missing, f"make setup leaves out what these docs tests need: {missing}"  # was: tensorboard, mlflow
