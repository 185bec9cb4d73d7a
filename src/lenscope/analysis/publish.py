"""Turn a plot() result into file bytes, and save them in results and on the node with the same bytes."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ..errors import UsageError
from .json_bytes import to_json_bytes
from .plots import to_pdf_bytes


def close_figure(figure: Figure) -> None:
    """Release a figure that pyplot manages (bare Figures need nothing; without pyplot loaded none is managed)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close(figure)


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
