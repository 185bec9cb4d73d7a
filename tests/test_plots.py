"""Plot helpers (A11) and strict JSON encoding of plot() results (A7)."""

from __future__ import annotations

import copy
import json

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import pytest
from matplotlib.figure import Figure

from lenscope.analysis import plots
from lenscope.analysis.results import to_json_bytes
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


@pytest.mark.parametrize("name", sorted(_calls()))
def test_helpers_return_figures_without_touching_global_state(name):
    import matplotlib.pyplot as plt

    before = copy.deepcopy(dict(matplotlib.rcParams))
    open_before = plt.get_fignums()
    fig = _calls()[name]()
    assert isinstance(fig, Figure)
    assert dict(matplotlib.rcParams) == before
    assert plt.get_fignums() == open_before  # no pyplot registry entry, so nothing to close or leak
    pdf = plots.to_pdf_bytes(fig)
    assert pdf.startswith(b"%PDF") and len(pdf) > 1000
    assert dict(matplotlib.rcParams) == before


def test_style_applies_inside_the_figure_only():
    fig = plots.line([0, 1, 2], [1.0, 2.0, 0.5], title="t", xlabel="x", ylabel="y")
    ax = fig.axes[0]
    assert ax.xaxis.label.get_text() == "x" and ax.yaxis.label.get_text() == "y" and ax.get_title() == "t"
    assert ax.xaxis.label.get_fontsize() == plots.STYLE["axes.labelsize"]
    assert not ax.spines["top"].get_visible()
    assert fig.get_layout_engine() is not None
    assert matplotlib.rcParams["axes.spines.top"] is True


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
