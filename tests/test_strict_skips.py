"""LENSCOPE_NO_SKIPS=1 turns skips into failures, so a CI step meant for a peer cannot pass by skipping every test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CASES = '''
import pytest

def test_runs():
    assert True

def test_skips_inside():
    pytest.skip("no peer here")
'''
MODULE_SKIP = 'import pytest\npytest.importorskip("no_such_peer_module_xyz")\n\ndef test_never():\n    pass\n'


def _pytest(folder: Path, strict: bool) -> subprocess.CompletedProcess[str]:
    """Pytest on `folder` with the strict-skips plugin loaded, LENSCOPE_NO_SKIPS set or not."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    env.pop("LENSCOPE_NO_SKIPS", None)
    if strict:
        env["LENSCOPE_NO_SKIPS"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "strict_skips", "-p", "no:cacheprovider",
                           "-p", "no:xdist", str(folder)], capture_output=True, text=True, env=env, cwd=folder,
                          timeout=120)


@pytest.mark.parametrize("strict", [False, True])
def test_skips_fail_only_when_strict(tmp_path: Path, strict: bool) -> None:
    inside, module = tmp_path / "inside", tmp_path / "module"
    inside.mkdir(), module.mkdir()
    (inside / "test_cases.py").write_text(CASES)
    (module / "test_module_skip.py").write_text(MODULE_SKIP)
    runs, skips = _pytest(inside, strict), _pytest(module, strict)
    if strict:                                                 # both kinds of skip fail, saying what was missing
        assert runs.returncode == 1 and "1 failed, 1 passed" in runs.stdout and "no peer here" in runs.stdout
        assert skips.returncode != 0 and "no_such_peer_module_xyz" in skips.stdout
        assert "LENSCOPE_NO_SKIPS=1" in runs.stdout + skips.stdout
    else:
        assert runs.returncode == 0 and "1 passed, 1 skipped" in runs.stdout, runs.stdout
        assert skips.returncode == 5 and "1 skipped" in skips.stdout, skips.stdout  # 5: no test ran
