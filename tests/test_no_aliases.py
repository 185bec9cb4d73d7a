"""No old names in code: each alias CHANGELOG.md lists is gone, and the one name for each thing is importable."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import lenscope

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "lenscope"
OLD = re.compile(r"^\| `(lenscope\.[\w.]+)`[^|]*\| `(lenscope\.[\w.]+)`", re.MULTILINE)


def _renames() -> list[tuple[str, str]]:
    """(old, new) of each row of CHANGELOG.md's table of removed names."""
    return OLD.findall((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))


def _resolve(dotted: str) -> object:
    """The module or attribute `dotted` names, or raise ImportError/AttributeError."""
    module, _, attr = dotted.rpartition(".")
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError:
        return getattr(importlib.import_module(module), attr)


def test_the_changelog_lists_the_removed_names():
    old = [name for name, _ in _renames()]
    assert "lenscope.analysis.sweeps" in old and "lenscope.capture.patch_access.Interventions" in old
    assert len(old) == 17, old


@pytest.mark.parametrize(("old", "new"), _renames())
def test_an_old_name_is_gone_and_its_new_name_is_there(old, new):
    assert _resolve(new) is not None
    with pytest.raises((ImportError, AttributeError)):
        _resolve(old)


def test_no_alias_module_or_assignment_is_left():
    assert not (SOURCE / "renamed.py").exists() and not (SOURCE / "analysis" / "execution.py").exists()
    for path in SOURCE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "keep_old_names" not in text and "DeprecationWarning" not in text, path  # no name kept "for a release"
        tree = ast.parse(text)
        classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
        aliases = [ast.unparse(node) for node in tree.body if isinstance(node, ast.Assign)
                   and isinstance(node.value, ast.Name) and node.value.id in classes]
        assert not aliases, (path, aliases)  # `Interventions = PatchAccess`


def test_self_batch_is_the_trainer_s_method_only():
    from lenscope.analysis import AnalysisBase
    from lenscope.training import BaseTrainer

    assert AnalysisBase.batch is BaseTrainer.batch  # was: a property wrapping it in a deprecated Mapping


def test_lenscope_plots_is_its_own_module_naming_the_helpers():
    from lenscope import plots
    from lenscope.analysis import plots as helpers

    assert plots is lenscope.plots and plots.__name__ == "lenscope.plots"  # was: it replaced itself in sys.modules
    assert all(getattr(plots, name) is getattr(helpers, name) for name in helpers.__all__)
