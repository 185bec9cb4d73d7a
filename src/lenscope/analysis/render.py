"""Turn a plot() result into file bytes, and save them in results and on the node with the same bytes."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import UsageError
from ..model_libraries import imported_module
from .json_bytes import to_json_bytes


def close_figure(figure: Any) -> None:
    """Release a figure that pyplot manages (bare Figures need nothing; without pyplot loaded none is managed)."""
    pyplot = imported_module("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close(figure)


def is_figure(output: Any) -> bool:
    """Whether `output` is a matplotlib Figure, without importing matplotlib (never imported: it cannot be one)."""
    figure = imported_module("matplotlib.figure")
    return figure is not None and isinstance(output, figure.Figure)


def render(name: str, output: Any) -> tuple[str, bytes] | None:
    """(filename, content) for a plot() result: a Figure -> NAME.pdf, a JSON value -> NAME.json, None -> nothing."""
    if output is None:
        return None
    if is_figure(output):
        # lazy: the PDF writer (matplotlib) loads only when there is a figure to write
        from .plots import to_pdf_bytes
        content = to_pdf_bytes(output)
        close_figure(output)
        return f"{name}.pdf", content
    if isinstance(output, (dict, list, tuple, str, int, float, bool, np.generic)):
        return f"{name}.json", to_json_bytes(output)
    raise UsageError(f"plot() of {name!r} returned {type(output).__name__}; "
                     "expected a matplotlib Figure, a JSON value (dict, list, number, string) or None")
