"""docs/attribution.md prints what its example prints: the Python blocks at full size (the doc's own training runs,
in a temporary folder), and every ```text block after a Python block found in their output, digit for digit.

The example is deterministic on one version of the code (two processes, two machines print the same); what the
training computes changes with the code (the TopK step's summation order, the dictionary init compiled ahead), and
TopK training carries a last-bit change into other latents. So the doc's figures are regenerated when this fails.
"""

from __future__ import annotations

import pytest
from doc_blocks import DOCS, printed_blocks, run_doc

DOC = DOCS / "attribution.md"


@pytest.mark.slow  # the doc's own runs: two grokking models and two transcoders (about 4 minutes on 2 cores)
def test_the_printed_figures_are_what_the_example_prints(tmp_path, capsys):
    run_doc(DOC, {"/tmp/lenscope-attribution-demo": str(tmp_path)}, min_blocks=4)
    out = capsys.readouterr().out
    printed = printed_blocks(DOC)
    assert len(printed) >= 4
    for block in printed:
        assert block in out, f"docs/attribution.md shows\n{block}\nbut the example printed\n{out}"
