"""tests/suite_profile.py records what a test costs (its CPU, its subprocesses', JAX's compile time by function)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from suite_profile import VARIABLE, host_reference, summary

CASES = '''
import subprocess, sys
import jax, jax.numpy as jnp

def test_compiles_a_named_function():
    def twice_plus_one(x):
        return 2 * x + 1
    assert float(jax.jit(twice_plus_one)(jnp.float32(3))) == 7.0

def test_starts_a_subprocess():
    subprocess.run([sys.executable, "-c", "sum(range(30_000_000))"], check=True)  # >0.1 s: the summary prints tenths
'''


def test_the_profile_names_the_compiled_function_and_counts_the_subprocess(tmp_path: Path) -> None:
    (tmp_path / "test_cases.py").write_text(CASES)
    env = {**os.environ, VARIABLE: str(tmp_path / "profile"), "PYTHONPATH": str(Path(__file__).parent)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "suite_profile", "-p", "no:cacheprovider",
                           "-p", "no:xdist", str(tmp_path / "test_cases.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    text = summary(tmp_path / "profile")
    assert text.startswith("2 tests:") and "1 subprocess starts" in text, text
    assert "twice_plus_one" in text and "1 compiles  twice_plus_one" in text, text
    line = next(line for line in text.splitlines() if line.endswith("test_cases.py"))
    assert float(line.split(" sub")[0].split("own")[1]) > 0.01, line  # the subprocess's CPU is counted
    assert int(line.split(" compiles")[0].split(" in ")[1]) >= 1, line  # the test's own compile is counted


def test_the_host_reference_runs_its_workload_in_a_fresh_process() -> None:
    wall, cpu = host_reference(repeats=1)
    assert cpu > 0.2 and wall > 0.2, (wall, cpu)  # an import of JAX and six compiles, not an empty process
