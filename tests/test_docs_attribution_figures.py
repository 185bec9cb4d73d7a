"""docs/attribution.md prints what its example prints: the Python blocks at full size (the doc's own training runs,
in a temporary folder), run as a user runs them, and every ```text block after a Python block found in their
output, digit for digit.

The example is deterministic for one version of the code and one set of XLA options: two processes, and a user's
machine, print the same. What the training computes changes with the code (the TopK step's summation order, the
inits compiled ahead) and with XLA's options: this suite's own (conftest.py: JAX_DISABLE_MOST_OPTIMIZATIONS, the
older CPU emitters) print other numbers, so the blocks run in a child process with JAX's defaults. When this
fails after such a change, the doc's blocks are regenerated from its output.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import DOCS, printed_blocks

DOC = DOCS / "attribution.md"
SUITE_ONLY = ("XLA_FLAGS", "JAX_DISABLE_MOST_OPTIMIZATIONS", "LENSCOPE_EAGER_FIRST")  # conftest.py's speed-ups
SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from doc_blocks import DOCS, run_doc
run_doc(DOCS / "attribution.md", {{"/tmp/lenscope-attribution-demo": {folder!r}}}, min_blocks=4)
"""


@pytest.mark.slow  # the doc's own runs: two grokking models and two transcoders (about 4 minutes on 2 cores)
def test_the_printed_figures_are_what_the_example_prints(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in SUITE_ONLY}
    script = SCRIPT.format(tests=str(Path(__file__).parent), folder=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = printed_blocks(DOC)
    assert len(printed) >= 4
    for block in printed:
        assert block in done.stdout, f"docs/attribution.md shows\n{block}\nbut the example printed\n{done.stdout}"
