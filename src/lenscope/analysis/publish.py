"""Turn a plot() result into file bytes, and save them in results and on the node with the same bytes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ..errors import UsageError
from .plots import to_pdf_bytes
from .results import to_json_bytes


def close_figure(figure: Figure) -> None:
    """Release a figure, also one that pyplot manages (a no-op for bare Figures)."""
    import matplotlib.pyplot as plt

    plt.close(figure)


def render(name: str, output: Any) -> tuple[str, bytes] | None:
    """(filename, content) for a plot() result: a Figure -> NAME.pdf, a JSON value -> NAME.json, None -> nothing."""
    if output is None:
        return None
    if isinstance(output, Figure):
        content = to_pdf_bytes(output)
        close_figure(output)
        return f"{name}.pdf", content
    if isinstance(output, (dict, list, tuple, str, int, float, bool, np.generic)):
        return f"{name}.json", to_json_bytes(output)
    raise UsageError(f"plot() of {name!r} returned {type(output).__name__}; "
                     "expected a matplotlib Figure, a JSON value (dict, list, number, string) or None")


def write_atomic(path: Path, content: bytes) -> Path:
    """Write bytes to `path` through a temporary name in the same folder, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
