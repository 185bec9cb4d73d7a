"""Geometry of a line chart drawn as inline SVG: scaled paths, nice ticks, linear or log y axis.

Only numbers and already-formatted tick labels come out of here; the template writes the SVG
elements (so every label passes through its HTML escaping).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

WIDTH, HEIGHT = 640, 230
LEFT, RIGHT, TOP, BOTTOM = 66, 24, 12, 32


@dataclass(frozen=True)
class Line:
    """One curve of a chart: its label, points and colour slot."""

    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    slot: int = 0


@dataclass
class Chart:
    """A drawn chart: SVG path data per line, tick positions with labels, and the data-to-pixel frame."""

    title: str
    log: bool
    paths: list[tuple[int, str, str, list, list]] = field(default_factory=list)  # (slot, label, d, xs, ys)
    dots: list[tuple[int, float, float]] = field(default_factory=list)  # lone points: (slot, x, y)
    xticks: list[tuple[float, str]] = field(default_factory=list)
    yticks: list[tuple[float, str]] = field(default_factory=list)
    frame: tuple[float, float, float, float] = (0.0, 1.0, 0.0, 1.0)  # x0, x1, y0, y1 in data units (y: log10 if log)
    empty: str = ""  # why nothing is drawn, if nothing is
    width: int = WIDTH
    height: int = HEIGHT
    box: tuple[int, int, int, int] = (LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM)


def chart(title: str, lines: Sequence[Line], log: bool = False, xspan: tuple[float, float] | None = None,
          width: int = WIDTH, height: int = HEIGHT, left: int = LEFT, right: int = RIGHT) -> Chart:
    """Lay out `lines` on one chart (y on a log10 scale when `log`; values <= 0 then left out); `xspan` fixes the x
    range (charts that share one x axis), `width`, `height`, `left` and `right` the frame in pixels."""
    out = Chart(title, log, width=width, height=height, box=(left, TOP, width - right, height - BOTTOM))
    kept = []
    for line in lines:
        pairs = [(x, math.log10(y) if log else y) for x, y in zip(line.xs, line.ys) if not log or y > 0]
        if pairs:
            kept.append((line, pairs))
    if not kept:
        out.empty = "no positive values for a log scale" if log and any(line.xs for line in lines) else "no values"
        return out
    xs = [x for _, pairs in kept for x, _ in pairs]
    ys = [y for _, pairs in kept for _, y in pairs]
    x0, x1 = xspan if xspan is not None and xspan[1] > xspan[0] else spread(min(xs), max(xs))
    y0, y1 = spread(min(ys), max(ys))
    if not log:
        y0, y1 = _pad(y0, y1)
    out.frame = (x0, x1, y0, y1)
    left, top, right, bottom = out.box

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (right - left)

    def py(y: float) -> float:
        return bottom - (y - y0) / (y1 - y0) * (bottom - top)

    for line, pairs in kept:
        if len(pairs) == 1:
            out.dots.append((line.slot, round(px(pairs[0][0]), 1), round(py(pairs[0][1]), 1)))
        d = "M" + " L".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pairs)
        xs_, ys_ = zip(*((x, 10 ** y if log else y) for x, y in pairs))
        out.paths.append((line.slot, line.label, d, list(xs_), list(ys_)))
    out.xticks = [(round(px(t), 1), tick_label(t)) for t in nice_ticks(x0, x1, 6) if x0 <= t <= x1]
    if log:
        out.yticks = [(round(py(t), 1), tick_label(10 ** t)) for t in log_ticks(y0, y1)]
    else:
        out.yticks = [(round(py(t), 1), tick_label(t)) for t in nice_ticks(y0, y1, 5) if y0 <= t <= y1]
    return out


def spread(lo: float, hi: float) -> tuple[float, float]:
    """A non-empty range around [lo, hi]."""
    if hi > lo:
        return lo, hi
    step = abs(lo) * 0.05 or 0.5
    return lo - step, hi + step


def _pad(lo: float, hi: float) -> tuple[float, float]:
    pad = (hi - lo) * 0.04
    return lo - pad, hi + pad


def nice_ticks(lo: float, hi: float, count: int) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) covering [lo, hi], about `count` of them."""
    raw = (hi - lo) / max(1, count)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step)
    return [round(k * step, 12) for k in range(first, math.floor(hi / step) + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """log10 positions of ticks for a log axis spanning log10 values [lo, hi]: decades, or 1-2-5 inside one."""
    decades = list(range(math.ceil(lo), math.floor(hi) + 1))
    if len(decades) >= 2:
        stride = max(1, len(decades) // 6)
        return [float(d) for d in decades[::stride]]
    ticks = [math.log10(m) + e for e in range(math.floor(lo), math.ceil(hi) + 1) for m in (1, 2, 5)]
    inside = [t for t in ticks if lo <= t <= hi]
    return inside if len(inside) >= 2 else [t for t in nice_ticks(lo, hi, 4) if lo <= t <= hi]


def tick_label(value: float) -> str:
    """A short tick label: integers plainly, else 4 significant digits."""
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.4g}"
