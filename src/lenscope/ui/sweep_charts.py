"""The sweep page's charts as inline SVG geometry: the objective against each param, and the best value so far.

As in svg.py, only numbers and formatted labels come out; the template writes the elements (and escapes labels).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lenscope.ui.svg import log_ticks, nice_ticks, spread, tick_label
from lenscope.ui.sweep_data import Sweep, TrialRow

WIDTH, HEIGHT = 420, 250
LEFT, RIGHT, TOP, BOTTOM = 58, 14, 12, 32
SPREAD = 5.0  # pixels between points of one choice value, so equal values stay visible


@dataclass(frozen=True)
class Dot:
    """One trial on a chart: data coordinates, its state (complete, pruned, best), hover text and run page."""

    x: Any
    y: float
    kind: str
    title: str
    href: str | None


@dataclass
class Plot:
    """A laid-out chart: points in pixels, an optional step line, ticks, and why it is empty when it is."""

    title: str
    param: str  # the param on the x axis; "" for the best-so-far chart (trial numbers)
    points: list[tuple[float, float, str, str, str | None]] = field(default_factory=list)  # (px, py, kind, title, href)
    line: str = ""
    xticks: list[tuple[float, str]] = field(default_factory=list)
    yticks: list[tuple[float, str]] = field(default_factory=list)
    empty: str = ""
    log: bool = False  # x on a log10 axis
    width: int = WIDTH
    height: int = HEIGHT
    box: tuple[int, int, int, int] = (LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM)
    scale: Any = None  # (x, y) data-to-pixel functions, for lines drawn over the points


def _hover(row: TrialRow, key: str) -> str:
    shown = " ".join(f"{k}={_text(v)}" for k, v in row.params.items())
    state = f"pruned at step {row.step}" if row.state == "pruned" else row.state
    return f"trial {row.number} ({state}): {key} {_text(row.value)} · {shown}"


def _text(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _dots(sweep: Sweep, x: Any) -> list[Dot]:
    """The complete and pruned trials (a pruned one at its last reported value), `x(row)` their x."""
    best = sweep.best.number if sweep.best else None
    return [Dot(x(r), r.value, "best" if r.number == best else r.state, _hover(r, sweep.key),
                f"/run/{r.lineage}" if r.lineage else None)
            for r in sweep.trials if r.state in ("complete", "pruned") and _finite(r.value)]


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def param_plots(sweep: Sweep) -> list[Plot]:
    """One scatter per param: the objective of each finished trial against the value it drew."""
    plots = []
    for param in sweep.params:
        dots = [d for d in _dots(sweep, lambda r, p=param: r.params.get(p)) if d.x is not None]
        plots.append(_layout(param, param, dots, sweep.scales.get(param, "linear")))
    return plots


def best_plot(sweep: Sweep) -> Plot:
    """Each finished trial's objective by trial number, with the best completed value so far as a step line."""
    dots = _dots(sweep, lambda r: r.number)
    plot = _layout(f"best {sweep.key} so far, by trial", "", dots, "linear")
    pick = max if sweep.direction == "maximize" else min
    steps, best = [], None
    for row in sorted(sweep.trials, key=lambda r: r.number):
        if row.state == "complete" and _finite(row.value):
            best = row.value if best is None else pick(best, row.value)
        if best is not None and row.state != "waiting":
            steps.append((row.number, best))
    if steps and not plot.empty:
        px, py = plot.scale
        d = f"M{px(steps[0][0]):.1f},{py(steps[0][1]):.1f}"
        for x, y in steps[1:]:
            d += f" H{px(x):.1f} V{py(y):.1f}"
        plot.line = d
    return plot


def _layout(title: str, param: str, dots: Sequence[Dot], scale: str) -> Plot:
    """Place `dots` on a chart whose x axis is linear, log10 or one slot per choice value."""
    plot = Plot(title, param)
    if not dots:
        plot.empty = "no finished trials yet"
        return plot
    left, top, right, bottom = plot.box
    choices = scale == "choice" and not all(_finite(d.x) for d in dots)
    log = plot.log = scale == "log" or scale == "choice" and not choices and _wide([d.x for d in dots])
    if choices:
        labels = list(dict.fromkeys(_text(d.x) for d in dots))
        slot = (right - left) / len(labels)
        xs = {label: left + slot * (i + 0.5) for i, label in enumerate(labels)}
        plot.xticks = [(round(x, 1), label) for label, x in xs.items()]

        def px(x: Any) -> float:
            return xs[_text(x)]
    else:
        values = [math.log10(d.x) if log else float(d.x) for d in dots]
        x0, x1 = _pad(*spread(min(values), max(values)))

        def px(x: Any) -> float:
            v = math.log10(x) if log else float(x)
            return left + (v - x0) / (x1 - x0) * (right - left)

        ticks = log_ticks(x0, x1) if log else [t for t in nice_ticks(x0, x1, 5) if x0 <= t <= x1]
        plot.xticks = [(round(left + (t - x0) / (x1 - x0) * (right - left), 1), tick_label(10 ** t if log else t))
                       for t in ticks]
    y0, y1 = _pad(*spread(min(d.y for d in dots), max(d.y for d in dots)))

    def py(y: float) -> float:
        return bottom - (y - y0) / (y1 - y0) * (bottom - top)

    plot.yticks = [(round(py(t), 1), tick_label(t)) for t in nice_ticks(y0, y1, 6) if y0 <= t <= y1]
    seen: dict[tuple[float, float], int] = {}
    for d in dots:
        x, y = round(px(d.x), 1), round(py(d.y), 1)
        n = seen[(x, y)] = seen.get((x, y), -1) + 1  # the same point drawn again: moved aside a little
        plot.points.append((x + SPREAD * n, y, d.kind, d.title, d.href))
    plot.scale = (px, py)
    return plot


def _wide(values: list[Any]) -> bool:
    """Numeric choice values spread over two decades or more, all positive: drawn on a log axis."""
    return all(v > 0 for v in values) and max(values) / min(values) >= 100


def _pad(lo: float, hi: float) -> tuple[float, float]:
    """[lo, hi] widened by 8% each side, so no point sits on the frame."""
    pad = (hi - lo) * 0.08
    return lo - pad, hi + pad


def importance_bars(importance: dict[str, float], width: float = 240) -> list[tuple[str, float, float]]:
    """(param, importance, bar length in pixels) for each param, most important first."""
    top = max(importance.values(), default=0) or 1
    return [(k, v, round(width * v / top, 1)) for k, v in sorted(importance.items(), key=lambda kv: -kv[1])]
