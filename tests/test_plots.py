"""Plot helpers (A11) and strict JSON encoding of plot() results (A7)."""

from __future__ import annotations

import copy
import json

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import pytest
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox

from lenscope.analysis import layout, plots
from lenscope.analysis.json_bytes import to_json_bytes
from lenscope.errors import UsageError

RNG = np.random.default_rng(0)
PATTERN = RNG.random((5, 7))


def _calls():
    return {
        "heatmap": lambda: plots.heatmap(PATTERN, title="Attention", xlabel="key", ylabel="query",
                                         xticklabels=list("abcdefg"), cbar_label="weight"),
        "heatmaps": lambda: plots.heatmaps([PATTERN, PATTERN.T @ PATTERN, PATTERN], ["h0", "h1", "h2"], ncols=2,
                                           xlabel="key", ylabel="query", title="Heads"),
        "heatmaps_own_scale": lambda: plots.heatmaps([PATTERN, 3 * PATTERN], shared_scale=False),
        "line": lambda: plots.line(np.arange(7), {"train": PATTERN[0], "val": PATTERN[1]}, title="Loss",
                                   xlabel="step", ylabel="loss", logy=True),
        "line_rows": lambda: plots.line(None, PATTERN, xlabel="step", ylabel="value"),
        "bar": lambda: plots.bar([f"layer {i}" for i in range(7)], PATTERN[0], title="Norm", xlabel="layer",
                                 ylabel="norm"),
        "scatter": lambda: plots.scatter(PATTERN[0], PATTERN[1], c=PATTERN[2], xlabel="a", ylabel="b",
                                         clabel="c"),
    }


def test_style_applies_inside_the_figure_only():
    fig = plots.line([0, 1, 2], [1.0, 2.0, 0.5], title="t", xlabel="x", ylabel="y")
    ax = fig.axes[0]
    assert ax.xaxis.label.get_text() == "x" and ax.yaxis.label.get_text() == "y" and ax.get_title() == "t"
    assert ax.xaxis.label.get_fontsize() == plots.STYLE["axes.labelsize"]
    assert not ax.spines["top"].get_visible()
    assert matplotlib.rcParams["axes.spines.top"] is True


def _boxes(fig):
    """Each axes' frame and tight box (labels, ticks, title) in pixels, measured as the saved figure lays out."""
    renderer = RendererAgg(int(fig.bbox.width), int(fig.bbox.height), fig.dpi)
    return [(ax, ax.get_window_extent(renderer), ax.get_tightbbox(renderer)) for ax in fig.axes]


def _assert_fits(fig):
    """Every label inside the figure, no panel's labels over another panel's frame, the title above all."""
    boxes = [(ax, frame, tight) for ax, frame, tight in _boxes(fig) if ax.axison]
    for ax, _, tight in boxes:
        assert fig.bbox.x0 - 1 <= tight.x0 and tight.x1 <= fig.bbox.x1 + 1, ax.get_title()
        assert fig.bbox.y0 - 1 <= tight.y0 and tight.y1 <= fig.bbox.y1 + 1, ax.get_title()
    for a, _, tight_a in boxes:
        for b, frame_b, _ in boxes:
            shared = Bbox.intersection(tight_a, frame_b)
            overlap = 0 if a is b or shared is None else min(shared.width, shared.height)
            assert overlap <= 1, (a.get_title(), b.get_title())
    for text in fig.texts:  # the figure title
        box = text.get_window_extent(RendererAgg(int(fig.bbox.width), int(fig.bbox.height), fig.dpi))
        assert box.y1 <= fig.bbox.y1 + 1 and all(box.y0 >= tight.y1 - 1 for _, _, tight in boxes)


@pytest.mark.parametrize("name", sorted(_calls()))
def test_helpers_return_figures_that_fit_their_labels_without_touching_global_state(name):
    """Each helper's figure (one made per helper, for both checks): no rcParams or pyplot registry touched, by the
    helper or by saving; every label inside the figure and off the other panels, as returned and as saved."""
    import matplotlib.pyplot as plt

    before = copy.deepcopy(dict(matplotlib.rcParams))
    open_before = plt.get_fignums()
    fig = _calls()[name]()
    assert isinstance(fig, Figure)
    assert dict(matplotlib.rcParams) == before
    assert plt.get_fignums() == open_before  # no pyplot registry entry, so nothing to close or leak
    _assert_fits(fig)  # as returned (what a notebook shows)
    pdf = plots.to_pdf_bytes(fig)
    assert pdf.startswith(b"%PDF") and len(pdf) > 1000
    assert dict(matplotlib.rcParams) == before
    _assert_fits(fig)  # as saved


def test_a_grid_of_many_panels_with_long_labels_fits():
    panels = [RNG.random((12, 12)) * 10 ** (i % 4) for i in range(10)]
    ticks = [f"token_{i:02d}" for i in range(12)]
    fig = plots.heatmaps(panels, [f"layer {i} head {i % 3}" for i in range(10)], ncols=4, shared_scale=False,
                         xticklabels=ticks, yticklabels=ticks, xlabel="key position", ylabel="query position",
                         title="Attention of every head")
    plots.to_pdf_bytes(fig)
    _assert_fits(fig)


def _tick_boxes(fig, ax):
    renderer = RendererAgg(int(fig.bbox.width), int(fig.bbox.height), fig.dpi)
    return [t.get_window_extent(renderer) for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]


@pytest.mark.parametrize("labels", [
    [f"L{i // 2}H{i % 2} {'zm'[i % 2]}" for i in range(10)],  # ten of six characters, wider than a bar's room
    [f"model/layers/{layer}/self_attn/o_proj h{head} zero" for layer in range(4) for head in range(8)],  # long, many
    [f"h{i}" for i in range(120)],  # more bars than 9 inches hold
])
def test_bar_labels_are_never_cut_or_overlapped(labels):
    """Finding (#37): bar labels read "n zero": labels wider than a bar's room are turned upright, the figure
    grows for long ones, and every label lies inside the figure, apart from its neighbours."""
    fig = plots.bar(labels, RNG.random(len(labels)), title="Ablation at lm.train@c340cd:4", ylabel="loss")
    plots.to_pdf_bytes(fig)
    _assert_fits(fig)
    ax = fig.axes[0]
    boxes = _tick_boxes(fig, ax)
    assert len([t for t in ax.get_xticklabels() if t.get_text()]) == len(labels)  # a bar's label is never dropped
    assert all(fig.bbox.x0 <= b.x0 and b.x1 <= fig.bbox.x1 and fig.bbox.y0 <= b.y0 for b in boxes)
    xs = sorted(boxes[: len(labels)], key=lambda b: b.x0)
    assert all(left.x1 <= right.x0 for left, right in zip(xs, xs[1:]))  # neighbours never overlap
    assert ax.get_window_extent().height >= layout.MIN_PANEL * fig.dpi - 1  # the bars keep room


def test_crowded_heatmap_tick_labels_are_thinned_not_overlapped():
    tokens = [f" token{i}" for i in range(64)]
    fig = plots.heatmap(RNG.random((64, 64)), xticklabels=tokens, yticklabels=tokens)
    plots.to_pdf_bytes(fig)
    _assert_fits(fig)
    ax = fig.axes[0]
    for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
        shown = [t.get_text() for t in labels]
        assert 1 < len(shown) < 64 and shown == tokens[:: tokens.index(shown[1])]  # every k-th, in order
    renderer = RendererAgg(int(fig.bbox.width), int(fig.bbox.height), fig.dpi)
    xs = sorted((t.get_window_extent(renderer) for t in ax.get_xticklabels()), key=lambda b: b.x0)
    ys = sorted((t.get_window_extent(renderer) for t in ax.get_yticklabels()), key=lambda b: b.y0)
    assert all(a.x1 <= b.x0 for a, b in zip(xs, xs[1:])) and all(a.y1 <= b.y0 for a, b in zip(ys, ys[1:]))


def test_saving_refits_what_plot_changed_after_the_helper():
    fig = plots.bar([str(k) for k in range(12)], RNG.random(12), xlabel="k", ylabel="norm")
    ax = fig.axes[0]
    left = ax.get_position().x0
    ax.set_ylabel("a much longer label, set in plot()\nafter the helper returned")
    ax.set_title("and a title")
    plots.to_pdf_bytes(fig)
    _assert_fits(fig)
    assert ax.get_position().x0 > left


def test_heatmap_content_and_labels():
    fig = plots.heatmap(PATTERN, xticklabels=list("abcdefg"), yticklabels=range(5), xlabel="k", ylabel="q")
    image = fig.axes[0].images[0]
    np.testing.assert_allclose(image.get_array(), PATTERN)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == list("abcdefg")
    assert len(fig.axes) == 2  # the colorbar


def test_pdf_bytes_are_deterministic():
    assert plots.to_pdf_bytes(plots.heatmap(PATTERN)) == plots.to_pdf_bytes(plots.heatmap(PATTERN))


@pytest.mark.parametrize(
    "call",
    [
        lambda: plots.heatmap(jnp.ones((2, 2))),
        lambda: plots.line(None, {"a": jnp.arange(3.0)}),
        lambda: plots.bar(["a"], [jnp.float32(1.0)]),
        lambda: plots.scatter(np.ones(2), np.ones(2), c=jnp.ones(2)),
        lambda: plots.heatmaps([np.ones((2, 2)), jnp.ones((2, 2))]),
    ],
)
def test_jax_arrays_are_refused_with_a_fix(call):
    with pytest.raises(UsageError, match=r"jax\.Array.*np\.asarray"):
        call()


def test_traced_values_are_refused():
    with pytest.raises(UsageError, match="jax.Array"):
        jax.jit(lambda x: plots.heatmap(x) and 0)(jnp.ones((2, 2)))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: plots.heatmap(np.ones(3)), r"heatmap\(\): data must be 2-D, got shape \(3,\)"),
        (lambda: plots.heatmap(PATTERN, xticklabels=["a"]), r"xticklabels has 1 entries, expected 7"),
        (lambda: plots.line([0, 1], {"a": [1, 2, 3]}), r"series 'a' has 3 points but x has 2"),
        (lambda: plots.line(None, {}), "empty dict"),
        (lambda: plots.bar(["a", "b"], [1.0]), r"labels has 2 entries, expected 1"),
        (lambda: plots.scatter([1, 2], [1]), "x has 2 points but y has 1"),
        (lambda: plots.heatmaps([]), "nonempty"),
        (lambda: plots.line(None, {"a": ["x", "y"]}), "numeric"),
    ],
)
def test_bad_shapes_are_named(call, message):
    with pytest.raises(UsageError, match=message):
        call()


def test_json_bytes_are_sorted_stable_and_convert_numpy():
    value = {"b": np.arange(3), "a": {"z": np.float32(0.5), "y": [np.int64(2), True, None, "s"]},
             "c": (1, 2.5), "d": np.array([[1.0, 2.0]], dtype=jnp.bfloat16)}
    data = to_json_bytes(value)
    assert data.endswith(b"\n") and data == to_json_bytes(value)
    assert data.index(b'"a"') < data.index(b'"b"') < data.index(b'"c"')
    assert json.loads(data) == {"a": {"y": [2, True, None, "s"], "z": 0.5}, "b": [0, 1, 2], "c": [1, 2.5],
                                "d": [[1.0, 2.0]]}


@pytest.mark.parametrize(
    "value, where",
    [
        ({"loss": {"curve": [1.0, float("nan")]}}, r"\['loss'\]\['curve'\]\[1\]"),
        ({"x": np.array([1.0, np.inf])}, r"\['x'\]\[1\]"),
        ([np.float64("-inf")], r"\[0\]"),
    ],
)
def test_json_rejects_non_finite_numbers_naming_the_key(value, where):
    with pytest.raises(UsageError, match=where + ".*finite"):
        to_json_bytes(value)


@pytest.mark.parametrize("value, message", [({1: 2}, "keys must be str"), ({"o": object()}, r"\['o'\]"),
                                            ({"c": 1j}, r"\['c'\]"), ({"b": b"x"}, "bytes")])
def test_json_rejects_what_json_cannot_hold(value, message):
    with pytest.raises(UsageError, match=message):
        to_json_bytes(value)


def test_long_panel_titles_wrap_within_their_panel_and_a_later_suptitle_stays_above():
    long = "a rather long per-panel title that describes exactly what this panel of the grid shows"
    fig = plots.heatmaps([RNG.random((6, 6)) for _ in range(6)], [f"head {i}: {long}" for i in range(6)], ncols=3)
    fig.suptitle("A figure title that plot() adds after the helper returned")  # not known to the helper
    plots.to_pdf_bytes(fig)
    _assert_fits(fig)
    renderer = RendererAgg(int(fig.bbox.width), int(fig.bbox.height), fig.dpi)
    for ax in fig.axes[:6]:
        title, frame = ax.title.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert "\n" in ax.get_title() and title.width <= frame.width + 1, ax.get_title()
        assert " ".join(ax.get_title().split()).endswith(long)  # wrapped at spaces, no word broken or lost


def test_a_title_changed_after_wrapping_is_wrapped_anew():
    fig = plots.heatmaps([RNG.random((4, 4))] * 2, ["short", "x " * 60], ncols=2)
    fig.axes[1].set_title("now short")
    plots.to_pdf_bytes(fig)
    assert fig.axes[1].get_title() == "now short"


def test_helper_figures_are_freed_after_saving():
    """A figure holds its layout Grid; the Grid must not form a cycle the garbage collector cannot see."""
    import gc
    import tracemalloc
    import weakref

    def one(i):
        fig = plots.heatmaps([RNG.random((16, 16))] * 4, ["a", "b", "c", "d"], title=f"t{i}") if i % 2 else \
            plots.heatmap(RNG.random((16, 16)), title=f"t{i}")
        plots.to_pdf_bytes(fig)
        return weakref.ref(fig)

    for i in range(2):  # warm caches (fonts, renderers) before measuring
        one(i)
    gc.collect()
    tracemalloc.start()  # (tracing slows drawing about fourfold: one figure of each kind is measured)
    before = tracemalloc.get_traced_memory()[0]
    refs = [one(i) for i in range(2)]
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert sum(r() is not None for r in refs) == 0
    assert grown < 2_000_000, f"2 saved figures left {grown / 1e6:.1f} MB allocated"  # ~10 MB each when leaking
