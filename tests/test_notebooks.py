"""The tutorial ports under docs/notebooks/ run as a user runs them: each notebook is executed top to bottom by
nbclient in a fresh python3 kernel (the test's own interpreter), and any cell error fails the test. Each builds its
own tiny model (transformers, no download) and, where the peers extra is installed, checks its numbers against
TransformerLens or SAELens on the same weights within 1e-4 in a cell of its own. The notebooks are stored with
their outputs stripped; this test is what executes them."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import INSTALL  # noqa: E402

NOTEBOOKS = Path(__file__).parent.parent / "docs" / "notebooks"
PORTS = ("exploratory_analysis", "induction_heads", "saelens_basics")
CELL_TIMEOUT = 300


@pytest.mark.parametrize("name", PORTS)
def test_notebook_runs_without_a_cell_error(name: str, tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat", reason="pip install -e '.[test]' (nbclient, nbformat, ipykernel)")
    nbclient = pytest.importorskip("nbclient", reason="pip install -e '.[test]' (nbclient, nbformat, ipykernel)")
    pytest.importorskip("ipykernel", reason="pip install -e '.[test]' (nbclient, nbformat, ipykernel)")
    for module in ("torch", "transformers", "tokenizers"):
        pytest.importorskip(module, reason=INSTALL)
    path = NOTEBOOKS / f"{name}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    assert not any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), \
        f"{path.name} is stored with outputs: strip them"
    client = nbclient.NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError, naming the cell and its traceback, on any error
    print(f"{name}: {time.perf_counter() - start:.1f} s")
    text = "\n".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                     for output in cell.outputs if output.get("output_type") == "stream")
    assert "Traceback" not in text
    if "not installed: the comparison is skipped" not in text:
        assert ": agree" in text, "the peer comparison cell printed no agreement"
