"""Paper-quality plot helpers (A11): CPU data in, a pyplot-free Figure out, style scoped to the call."""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import matplotlib
import numpy as np
from cycler import cycler
from matplotlib.figure import Figure

from lenscope.analysis.layout import Grid, uncrowd
from lenscope.errors import UsageError
from lenscope.model_libraries import imported_module

__all__ = ["STYLE", "bar", "heatmap", "heatmaps", "line", "prewarm", "scatter", "to_pdf_bytes"]

# Okabe-Ito: distinguishable under the common colour-vision deficiencies and in greyscale print.
_PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]

STYLE: dict[str, Any] = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": cycler(color=_PALETTE),
    "lines.linewidth": 1.5,
    "image.cmap": "viridis",
    "figure.dpi": 150,
    "savefig.dpi": 300,
    "pdf.fonttype": 42,  # embed TrueType so text stays editable and searchable in papers
    "ps.fonttype": 42,
}


@contextlib.contextmanager
def _styled() -> Iterator[None]:
    with matplotlib.rc_context(STYLE):
        yield


def _figure(width: float = 4.5, height: float = 3.2) -> Figure:
    # A bare Figure (no pyplot) is never entered in pyplot's global registry, so nothing leaks or needs closing.
    return Figure(figsize=(width, height))


def _colorbar(fig: Figure, image: Any) -> Any:
    """A colorbar in its own axes; the figure's Grid places it."""
    return fig.colorbar(image, cax=fig.add_axes((0.0, 0.0, 1.0, 1.0)))


def _laid_out(fig: Figure, grid: Grid) -> Figure:
    """Place the grid now (for display), and keep it: saving refits, also after changes plot() made."""
    for ax in fig.axes:  # ticks are remade when drawn, from the rc in force then: pin their size to the figure
        ax.tick_params(axis="x", labelsize=STYLE["xtick.labelsize"])
        ax.tick_params(axis="y", labelsize=STYLE["ytick.labelsize"])
    grid.fit(fig, passes=1)
    if uncrowd(fig, fig.axes):  # labels that would overlap: upright or thinned, then placed again
        grid.fit(fig, passes=1)
    fig.lenscope_grid = grid
    return fig


def _cpu(fn: str, name: str, value: Any) -> Any:
    """Refuse device/traced arrays anywhere in `value`; plots never decide what to gather."""
    jax = imported_module("jax")
    if jax is not None and isinstance(value, jax.Array):
        raise UsageError(
            f"{fn}(): {name} is a jax.Array; plot helpers take CPU data: return it from analyze() so the "
            f"framework gathers it, then pass np.asarray({name.split('[')[0]}) in plot()"
        )
    if isinstance(value, Mapping):
        for key, item in value.items():
            _cpu(fn, f"{name}[{key!r}]", item)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _cpu(fn, f"{name}[{i}]", item)
    return value


def _array(fn: str, name: str, value: Any, ndim: int | tuple[int, ...]) -> np.ndarray:
    """`value` as a float numpy array of the expected rank, or a UsageError naming it."""
    _cpu(fn, name, value)
    try:
        array = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as err:
        raise UsageError(f"{fn}(): {name} must be numeric array-like ({err})") from None
    ranks = (ndim,) if isinstance(ndim, int) else ndim
    if array.ndim not in ranks:
        want = " or ".join(f"{r}-D" for r in ranks)
        raise UsageError(f"{fn}(): {name} must be {want}, got shape {array.shape}")
    return array


def _labels(fn: str, name: str, value: Any, count: int) -> list[str] | None:
    if value is None:
        return None
    _cpu(fn, name, value)
    labels = [str(v) for v in value]
    if len(labels) != count:
        raise UsageError(f"{fn}(): {name} has {len(labels)} entries, expected {count}")
    return labels


def _decorate(ax: Any, title: str | None, xlabel: str | None, ylabel: str | None) -> None:
    if title:
        ax.set_title(title)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)


def _draw_heatmap(ax: Any, data: np.ndarray, cmap: str, vmin: Any, vmax: Any) -> Any:
    for spine in ax.spines.values():  # an image is framed on all four sides, unlike the open line-plot style
        spine.set_visible(True)
    return ax.imshow(data, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")


def _ticklabels(ax: Any, xticklabels: list[str] | None, yticklabels: list[str] | None) -> None:
    """Cell labels where given; elsewhere ticks on whole cells only (never -0.5, 0, 0.5 on a small array)."""
    from matplotlib.ticker import MaxNLocator  # lazy: matplotlib.ticker loads with the first heatmap

    if xticklabels is not None:
        ax.set_xticks(range(len(xticklabels)), xticklabels)  # turned upright or thinned when crowded (_laid_out)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if yticklabels is not None:
        ax.set_yticks(range(len(yticklabels)), yticklabels)
    else:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def heatmap(
    data: Any,
    *,
    title: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    xticklabels: Sequence[Any] | None = None,
    yticklabels: Sequence[Any] | None = None,
    cmap: str = "viridis",
    colorbar: bool = True,
    vmin: float | None = None,
    vmax: float | None = None,
    cbar_label: str | None = None,
) -> Figure:
    """A 2-D array as an image (rows down, columns across), e.g. an attention pattern."""
    array = _array("heatmap", "data", data, 2)
    xt = _labels("heatmap", "xticklabels", xticklabels, array.shape[1])
    yt = _labels("heatmap", "yticklabels", yticklabels, array.shape[0])
    with _styled():
        fig = _figure()
        ax = fig.add_subplot()
        image = _draw_heatmap(ax, array, cmap, vmin, vmax)
        _ticklabels(ax, xt, yt)
        _decorate(ax, title, xlabel, ylabel)
        grid = Grid.of(ax)
        if colorbar:
            bar = _colorbar(fig, image)
            grid.colorbars[0, 0] = bar.ax
            if cbar_label:
                bar.set_label(cbar_label)
        return _laid_out(fig, grid)


def heatmaps(
    panels: Sequence[Any],
    titles: Sequence[str] | None = None,
    *,
    ncols: int | None = None,
    title: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    xticklabels: Sequence[Any] | None = None,
    yticklabels: Sequence[Any] | None = None,
    cmap: str = "viridis",
    shared_scale: bool = True,
    colorbar: bool = True,
) -> Figure:
    """A grid of 2-D heatmaps (e.g. one per attention head); one shared colour scale by default."""
    _cpu("heatmaps", "panels", panels)
    arrays = [_array("heatmaps", f"panels[{i}]", p, 2) for i, p in enumerate(panels)]
    if not arrays:
        raise UsageError("heatmaps(): panels must be a nonempty list of 2-D arrays")
    names = _labels("heatmaps", "titles", titles, len(arrays))
    xt = _labels("heatmaps", "xticklabels", xticklabels, arrays[0].shape[1])
    yt = _labels("heatmaps", "yticklabels", yticklabels, arrays[0].shape[0])
    cols = ncols or min(len(arrays), 4)
    if not isinstance(cols, int) or cols < 1:
        raise UsageError(f"heatmaps(): ncols must be a positive int, got {ncols!r}")
    rows = math.ceil(len(arrays) / cols)
    lo = min(float(np.nanmin(a)) for a in arrays) if shared_scale else None
    hi = max(float(np.nanmax(a)) for a in arrays) if shared_scale else None
    with _styled():
        fig = _figure(2.2 * cols + 0.8, 2.0 * rows + 0.4)
        axes = fig.subplots(rows, cols, squeeze=False)
        grid, image = Grid(axes), None
        for i, ax in enumerate(axes.flat):
            if i >= len(arrays):
                ax.set_axis_off()
                continue
            image = _draw_heatmap(ax, arrays[i], cmap, lo, hi)
            _ticklabels(ax, xt, yt)
            bottom = i + cols >= len(arrays)  # nothing drawn below this panel
            _decorate(ax, names[i] if names else None, xlabel if bottom else None, ylabel if i % cols == 0 else None)
            if colorbar and not shared_scale:
                grid.colorbars[divmod(i, cols)] = _colorbar(fig, image).ax
        if colorbar and shared_scale and image is not None:
            grid.shared_colorbar = _colorbar(fig, image).ax
        if title:
            grid.suptitle = fig.suptitle(title)
        return _laid_out(fig, grid)


def line(
    x: Any,
    ys: Mapping[str, Any] | Any,
    *,
    title: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    logy: bool = False,
) -> Figure:
    """One or more series against x: a dict gives a legend, a 2-D array one line per row; x=None means 0..n-1."""
    _cpu("line", "ys", ys)
    if isinstance(ys, Mapping):
        if not ys:
            raise UsageError("line(): ys is an empty dict; give at least one series")
        series = {str(k): _array("line", f"ys[{k!r}]", v, 1) for k, v in ys.items()}
    else:
        values = _array("line", "ys", ys, (1, 2))
        rows = values[None] if values.ndim == 1 else values
        series = {str(i): row for i, row in enumerate(rows)}
    length = len(next(iter(series.values())))
    xs = np.arange(length) if x is None else _array("line", "x", x, 1)
    for name, ys_i in series.items():
        if len(ys_i) != len(xs):
            raise UsageError(f"line(): series {name!r} has {len(ys_i)} points but x has {len(xs)}")
    with _styled():
        fig = _figure()
        ax = fig.add_subplot()
        for name, ys_i in series.items():
            ax.plot(xs, ys_i, label=name)
        if logy:
            ax.set_yscale("log")
        _decorate(ax, title, xlabel, ylabel)
        if len(series) > 1 and len(series) <= 12:
            ax.legend()
        return _laid_out(fig, Grid.of(ax))


def bar(
    labels: Sequence[Any],
    values: Any,
    *,
    title: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
) -> Figure:
    """One bar per label, e.g. a score per layer or per frequency."""
    heights = _array("bar", "values", values, 1)
    names = _labels("bar", "labels", labels, len(heights))
    with _styled():
        count = len(heights)  # up to 9 inches wide; past 37 bars 0.2 inch each, so every upright label has room
        fig = _figure(max(3.0, min(0.3 * count + 1.5, 9.0), 0.2 * count + 1.5), 3.2)
        ax = fig.add_subplot()
        ax.bar(range(count), heights, color=_PALETTE[0])
        ax.set_xticks(range(count), names)  # upright when wider than a bar's room (_laid_out measures them)
        _decorate(ax, title, xlabel, ylabel)
        return _laid_out(fig, Grid.of(ax))


def scatter(
    x: Any,
    y: Any,
    *,
    c: Any = None,
    title: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    cmap: str = "viridis",
    clabel: str | None = None,
) -> Figure:
    """Points (x[i], y[i]), optionally coloured by c with a colorbar."""
    xs = _array("scatter", "x", x, 1)
    ys = _array("scatter", "y", y, 1)
    if xs.shape != ys.shape:
        raise UsageError(f"scatter(): x has {xs.shape[0]} points but y has {ys.shape[0]}")
    colors = None if c is None else _array("scatter", "c", c, 1)
    if colors is not None and colors.shape != xs.shape:
        raise UsageError(f"scatter(): c has {colors.shape[0]} values but x has {xs.shape[0]}")
    with _styled():
        fig = _figure()
        ax = fig.add_subplot()
        grid = Grid.of(ax)
        if colors is None:
            ax.scatter(xs, ys, s=12, color=_PALETTE[0])
        else:
            points = ax.scatter(xs, ys, s=12, c=colors, cmap=cmap)
            bar_ = _colorbar(fig, points)
            grid.colorbars[0, 0] = bar_.ax
            if clabel:
                bar_.set_label(clabel)
        _decorate(ax, title, xlabel, ylabel)
        return _laid_out(fig, grid)


def to_pdf_bytes(fig: Figure) -> bytes:
    """The figure as PDF bytes, with embedded TrueType fonts and no creation date (same figure, same bytes)."""
    if not isinstance(fig, Figure):
        raise UsageError(f"to_pdf_bytes() takes a matplotlib Figure, got {type(fig).__name__}")
    buffer = io.BytesIO()
    with _styled():
        grid = getattr(fig, "lenscope_grid", None)
        if grid is not None:
            grid.fit(fig)  # one measuring pass when nothing moved since the helper placed it
        fig.savefig(buffer, format="pdf", metadata={"CreationDate": None, "Creator": "lenscope"})
    return buffer.getvalue()


def prewarm() -> None:
    """Render one tiny PDF, so fonts, font subsetting and the PDF backend are loaded before the first real figure."""
    to_pdf_bytes(heatmap(np.eye(2), title="lenscope", xlabel="x", ylabel="y", xticklabels=["0", "1"]))
