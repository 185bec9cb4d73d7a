"""Grid layout for the plot helpers: margins measured from the text, without constrained layout's extra draw.

Constrained layout solves the same problem in general, but it makes saving draw every figure twice,
which more than doubles the cost of a tandem figure. The helpers know their structure (a grid of
panels, colorbars, a title), so measuring how far each axes' labels reach beyond it and sizing the
margins to that is enough, and it costs one text-measuring pass (two when the tick labels move).
Text is never cut: a figure whose labels leave a panel less than MIN_PANEL grows, and tick labels that would
overlap their neighbours are turned upright or thinned (`uncrowd`).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FixedLocator
from matplotlib.transforms import Bbox

__all__ = ["Grid", "uncrowd"]

PAD = 4 / 72  # inches around the figure and between panels
BAR_GAP = 0.08  # inches between a panel and its colorbar
BAR_WIDTH = 0.12  # inches
MIN_PANEL = 1.0  # inches: the least a panel keeps of its width and height; the figure grows for longer labels
_GAP = 4 / 72  # inches between neighbouring tick labels
_SETTLED = 0.5  # pixels: a measurement that moved less than this needs no further pass

Spill = tuple[float, float, float, float]  # inches that labels reach beyond an axes: left, right, bottom, top


@dataclass
class Grid:
    """A rows x cols grid of panels, each with an optional colorbar at its right, an optional colorbar
    spanning the grid's right side, and an optional figure title above everything."""

    panels: tuple[tuple[Axes, ...], ...]  # rows of Axes; tuples, not an object ndarray, whose cycles GC cannot see
    colorbars: dict[tuple[int, int], Axes] = field(default_factory=dict)
    shared_colorbar: Axes | None = None
    suptitle: Text | None = None
    _placed_for: list[Spill] | None = field(default=None, repr=False)  # the measurement the positions answer
    _titles: dict[int, tuple[str, str]] = field(default_factory=dict, repr=False)  # panel -> (as given, as wrapped)

    def __post_init__(self) -> None:
        self.panels = tuple(tuple(row) for row in self.panels)

    @classmethod
    def of(cls, ax: Axes) -> Grid:
        """A single panel."""
        return cls(((ax,),))

    def _cells(self) -> list[tuple[tuple[int, int], Axes]]:
        return [((r, c), ax) for r, row in enumerate(self.panels) for c, ax in enumerate(row)]

    def fit(self, fig: Figure, passes: int = 3) -> None:
        """Place every axes so all text fits: measure, solve the margins, repeat until the measurement settles."""
        renderer = RendererAgg(max(int(fig.bbox.width), 1), max(int(fig.bbox.height), 1), fig.dpi)
        self.suptitle = self.suptitle or getattr(fig, "_suptitle", None)  # also one plot() added after the helper
        for _ in range(passes):
            spills = [_spill(ax, renderer, fig.dpi) for ax in self._measured()]
            if self._placed_for is not None and np.allclose(spills, self._placed_for, atol=_SETTLED / fig.dpi, rtol=0):
                return
            self._place(fig, spills, renderer)
            self._placed_for = spills

    def _measured(self) -> list[Axes]:
        axes = [ax for _, ax in self._cells()] + list(self.colorbars.values())
        return axes + ([self.shared_colorbar] if self.shared_colorbar is not None else [])

    def _place(self, fig: Figure, spills: list[Spill], renderer: RendererAgg) -> None:
        rows, cols = len(self.panels), len(self.panels[0])
        spill = dict(zip(map(id, self._measured()), spills))
        width, height = fig.get_size_inches()
        left, right = np.zeros(cols), np.zeros(cols)
        bottom, top = np.zeros(rows), np.zeros(rows)
        for (r, c), ax in self._cells():
            l_, r_, b_, t_ = spill[id(ax)]
            bar = self.colorbars.get((r, c))
            if bar is not None:
                _, br, bb, bt = spill[id(bar)]
                r_, b_, t_ = max(r_, BAR_GAP + BAR_WIDTH + br), max(b_, bb), max(t_, bt)
            left[c], right[c] = max(left[c], l_), max(right[c], r_)
            bottom[r], top[r] = max(bottom[r], b_), max(top[r], t_)
        head = side = 0.0
        if self.shared_colorbar is not None:
            _, br, bb, bt = spill[id(self.shared_colorbar)]
            side, top[0], bottom[-1] = BAR_GAP + BAR_WIDTH + br, max(top[0], bt), max(bottom[-1], bb)
        if self.suptitle is not None and self.suptitle.get_text():
            head = self.suptitle.get_window_extent(renderer).height / fig.dpi + PAD
            self.suptitle.set_y(1 - PAD / height)
            self.suptitle.set_verticalalignment("top")
        frame_w = (cols + 1) * PAD + left.sum() + right.sum() + side
        frame_h = (rows + 1) * PAD + head + bottom.sum() + top.sum()
        if width < frame_w + cols * MIN_PANEL or height < frame_h + rows * MIN_PANEL:  # grow rather than cut text
            width, height = max(width, frame_w + cols * MIN_PANEL), max(height, frame_h + rows * MIN_PANEL)
            fig.set_size_inches(width, height)
            if self.suptitle is not None and self.suptitle.get_text():
                self.suptitle.set_y(1 - PAD / height)
        cell_w, cell_h = (width - frame_w) / cols, (height - frame_h) / rows
        for (r, c), ax in self._cells():
            self._wrap_title(r * cols + c, ax, cell_w * fig.dpi, renderer)
        x0 = np.array([PAD + left[: c + 1].sum() + right[:c].sum() + c * (cell_w + PAD) for c in range(cols)])
        y_top = np.array([height - PAD - head - top[: r + 1].sum() - bottom[:r].sum() - r * (cell_h + PAD)
                          for r in range(rows)])
        for (r, c), ax in self._cells():
            ax.set_position(_frac(fig, x0[c], y_top[r] - cell_h, cell_w, cell_h))
            bar = self.colorbars.get((r, c))
            if bar is not None:
                bar.set_position(_frac(fig, x0[c] + cell_w + BAR_GAP, y_top[r] - cell_h, BAR_WIDTH, cell_h))
        if self.shared_colorbar is not None:
            x = x0[-1] + cell_w + right[-1] + BAR_GAP
            bottom_edge = y_top[-1] - cell_h
            self.shared_colorbar.set_position(_frac(fig, x, bottom_edge, BAR_WIDTH, y_top[0] - bottom_edge))


    def _wrap_title(self, index: int, ax: Axes, width: float, renderer: RendererAgg) -> None:
        """Break a panel title into lines no wider than the panel (`width` pixels); the next pass measures it."""
        title = ax.title
        given, wrapped = self._titles.get(index, ("", None))
        if title.get_text() != wrapped:  # new, or changed by plot() since the last fit
            given = title.get_text()
        title.set_text(given)
        full = title.get_window_extent(renderer).width if given else 0.0
        if full > width:
            chars = max(int(len(given) * width / full), 8)
            lines = [textwrap.fill(line, chars, break_long_words=False, break_on_hyphens=False)
                     for line in given.split("\n")]
            title.set_text("\n".join(lines))
        self._titles[index] = (given, title.get_text())


def uncrowd(fig: Figure, axes: Iterable[Axes]) -> bool:
    """Tick labels at fixed ticks (set_xticks) that would overlap their neighbours: x labels turned upright, and
    labels still closer than their line height shown at every k-th tick. Whether anything changed (measure again)."""
    renderer = RendererAgg(max(int(fig.bbox.width), 1), max(int(fig.bbox.height), 1), fig.dpi)
    changed = False
    for ax in axes:
        for axis in (ax.xaxis, ax.yaxis):
            if isinstance(axis.get_major_locator(), FixedLocator):
                changed |= _uncrowd_axis(ax, axis, renderer, _GAP * fig.dpi)
    return changed


def _uncrowd_axis(ax: Axes, axis, renderer: RendererAgg, gap: float) -> bool:
    """Turn one axis's labels upright (x only) or thin them, from their measured extents and the ticks' spacing."""
    ticks, labels = list(axis.get_majorticklocs()), [t.get_text() for t in axis.get_majorticklabels()]
    if len(ticks) < 2 or len(labels) != len(ticks):
        return False
    horizontal = axis is ax.xaxis
    at = ax.transData.transform([(t, t) for t in ticks])[:, 0 if horizontal else 1]
    pitch = float(np.min(np.abs(np.diff(at))))
    boxes = [t.get_window_extent(renderer) for t in axis.get_majorticklabels() if t.get_text()]
    if not boxes:
        return False
    wide, tall = max(b.width for b in boxes), max(b.height for b in boxes)
    changed = False
    if horizontal and wide + gap > pitch and axis.get_majorticklabels()[0].get_rotation() == 0:
        ax.tick_params(axis="x", labelrotation=90)
        wide, tall, changed = tall, wide, True
    across = wide if horizontal else tall  # the extent along the axis, where neighbours meet
    if across + gap > pitch:
        step = math.ceil((across + gap) / pitch)
        axis.set_ticks(ticks[::step], labels[::step])
        changed = True
    return changed


def _spill(ax: Axes, renderer: RendererAgg, dpi: float) -> Spill:
    """How far, in inches, the axes' labels, ticks and title reach beyond its frame on each side (the title's
    height only: it wraps to its panel's width)."""
    tight = ax.get_tightbbox(renderer, for_layout_only=True)  # also leaves out the axis labels' lengths: added back
    if tight is None:
        return (0.0, 0.0, 0.0, 0.0)
    labels = [a.label.get_window_extent(renderer) for a in (ax.xaxis, ax.yaxis) if ax.axison and a.get_visible()
              and a.label.get_visible() and a.label.get_text()]
    tight = Bbox.union([tight, *labels])
    frame = ax.get_window_extent(renderer)
    return (max(frame.x0 - tight.x0, 0.0) / dpi, max(tight.x1 - frame.x1, 0.0) / dpi,
            max(frame.y0 - tight.y0, 0.0) / dpi, max(tight.y1 - frame.y1, 0.0) / dpi)


def _frac(fig: Figure, x: float, y: float, w: float, h: float) -> tuple[float, float, float, float]:
    width, height = fig.get_size_inches()
    return (x / width, y / height, w / width, h / height)
