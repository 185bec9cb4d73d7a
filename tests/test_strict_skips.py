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
    command = [sys.executable, "-m", "pytest", "-q", "-p", "strict_skips", "-p", "no:cacheprovider", "-p", "no:xdist",
               "--continue-on-collection-errors", str(folder)]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=folder, timeout=120)


@pytest.mark.parametrize("strict", [False, True])
def test_skips_fail_only_when_strict(tmp_path: Path, strict: bool) -> None:
    (tmp_path / "test_cases.py").write_text(CASES)
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIP)
    done = _pytest(tmp_path, strict)  # one run: a skip inside a test and a module skipped at collection
    if strict:                        # both kinds of skip fail, saying what was missing
        assert done.returncode == 1 and "no peer here" in done.stdout and "no_such_peer_module_xyz" in done.stdout
        assert "1 failed, 1 passed, 1 error" in done.stdout and "LENSCOPE_NO_SKIPS=1" in done.stdout, done.stdout
    else:
        assert done.returncode == 0 and "1 passed, 2 skipped" in done.stdout, done.stdout
