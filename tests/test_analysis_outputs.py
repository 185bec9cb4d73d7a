"""What an analysis leaves behind (seed 000, A6, A7, A11): gathered NumPy for plot(), PDF/JSON/None, same bytes.

Each test is named after the seed sentence it checks; real grokking models, real stores.
"""

from __future__ import annotations

import json

import jax
import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from analysis_probes import config, probe, results_file, spectrum_json, train_base

import lenscope
from lenscope.analysis import AnalysisBase
from lenscope.errors import UsageError
from lenscope.runner import run_job
from lenscope.store import Store


def run(tmp_path, cls, *extra):
    """Run `cls` on initialized state; return (analysis, node, store)."""
    analysis = cls(config(tmp_path, *extra), store=tmp_path / "runs")
    node = run_job(analysis)
    return analysis, node, Store(tmp_path / "runs")


def pdf_of_spectrum(self, results):
    return self.bar([str(k) for k in range(len(results["norm"]))], results["norm"], xlabel="k", ylabel="norm")


# -- "Analysis returns a JAX-compatible PyTree; the framework gathers it before host zero calls plot(),
#     which returns a Figure, JSON value, or None." -----------------------------------------------------
def test_the_framework_gathers_the_pytree_before_host_zero_calls_plot_with_numpy(tmp_path):
    nested = probe("nested", reduce=lambda self, layer, inputs: {
        "norm": layer.embedding.sum(), "pair": (inputs.inputs.shape[0] * 1.0, None), "rows": [layer.embedding[:2]]})
    analysis, _, _ = run(tmp_path, nested)
    results = analysis.plotted
    assert isinstance(results["norm"], np.ndarray) and not isinstance(results["norm"], jax.Array)
    assert isinstance(results["rows"][0], np.ndarray) and results["rows"][0].shape == (2, 32)
    assert results["pair"][1] is None and float(results["pair"][0]) == analysis.data.size("validation")
    assert jax.tree_util.tree_structure(results) == jax.tree_util.tree_structure(
        {"norm": 0, "pair": (0, None), "rows": [0]})


# -- "Crop/reduce large arrays in analyze() before returning them." -------------------------------------
def test_crop_reduce_in_analyze_results_keep_the_shapes_analyze_returns(tmp_path):
    from lenscope.examples.grokking_analyses import AttentionAnalysis

    analysis = AttentionAnalysis(config(tmp_path, "analysis/examples=4"), store=tmp_path / "runs")
    analysis.setup()
    results = analysis.compute()
    assert results["examples"].shape == (4, 1, 2, 3, 3) and results["mean"].shape == (1, 2, 3, 3)
    np.testing.assert_allclose(results["mean"].sum(-1), 1.0, rtol=1e-5)  # attention rows are distributions
    assert np.all(np.triu(results["mean"], k=1) == 0)  # causal: no weight on later positions
    analysis.cleanup()


# -- "Each JSON/PDF is saved in results and as an artifact on the current node." -------------------------
# -- "Query with store.query().node(node).artifact().select(), or use get(node)." ------------------------
# -- "Each analysis payload contains filename and content (the exact file bytes)." -----------------------
@pytest.mark.parametrize("output, filename", [(pdf_of_spectrum, "shown.pdf"), (spectrum_json, "shown.json")])
def test_each_json_pdf_is_saved_in_results_and_as_an_artifact_with_the_exact_file_bytes(tmp_path, output, filename):
    _, node, store = run(tmp_path, probe("shown", output=output))
    on_disk = results_file(tmp_path, node, filename).read_bytes()
    rows = store.query().node(node).artifact().select()
    assert [(row["node"], row["name"], row["filename"]) for row in rows] == [(str(node), "shown", filename)]
    payload = rows[0]["payload"]
    assert (payload.filename, payload.content) == (filename, on_disk)
    record = store.get(node).artifacts["shown"]
    assert (record.filename, record.content) == (filename, on_disk)
    if filename.endswith(".pdf"):
        assert on_disk.startswith(b"%PDF")
    else:
        saved = json.loads(on_disk)
        assert saved["p"] == 23 and len(saved["norm"]) == 12 and on_disk.endswith(b"\n")


def test_plot_returning_none_saves_nothing(tmp_path):
    analysis, node, store = run(tmp_path, probe("silent"))
    assert "plot" in analysis.events
    assert store.query().node(node).artifact().select() == [] and store.get(node).artifacts == {}
    assert not (tmp_path / "results").exists()


def test_json_nan_is_an_error_naming_the_key_and_nothing_is_saved(tmp_path):
    cls = probe("nan", output=lambda self, results: {"fine": 1.0, "spectrum": {"k0": float("nan")}})
    with pytest.raises(UsageError, match=r"\['spectrum'\]\['k0'\].*finite"):
        run(tmp_path, cls)
    store = Store(tmp_path / "runs")
    [node] = store.query().all()
    assert store.status(node) == "failed" and store.query().artifact().select() == []
    assert not (tmp_path / "results").exists()


def test_plot_returning_something_else_is_an_error_naming_the_type(tmp_path):
    with pytest.raises(UsageError, match="returned set; expected a matplotlib Figure, a JSON value"):
        run(tmp_path, probe("odd", output=lambda self, results: {1, 2}))


def test_figures_are_closed_after_saving(tmp_path):
    def pyplot_figure(self, results):
        figure = plt.figure()
        figure.gca().plot(results["norm"])
        self.number = figure.number
        return figure

    analysis, node, _ = run(tmp_path, probe("pyplot", output=pyplot_figure))
    assert analysis.number not in plt.get_fignums()
    assert results_file(tmp_path, node, "pyplot.pdf").read_bytes().startswith(b"%PDF")


# -- "NAME identifies the file and artifact, so distinct analyses on the same node must use distinct names." --
def test_name_identifies_the_file_and_artifact_distinct_names_on_one_node(tmp_path):
    base = train_base(tmp_path)
    store = Store(tmp_path / "runs")
    for name in ("one", "two", "one"):
        cls = probe(name, output=lambda self, results: {"name": self.NAME, "run": len(store.artifact_names(base))})
        run_job(cls, config(tmp_path), base=base, store=store)
    assert sorted(store.get(base).artifacts) == ["one", "two"]
    history = store.artifact_history(base, "one")
    assert [version for version, _ in history] == [1, 2]  # the same NAME again: a new version, the file replaced
    latest = results_file(tmp_path, base, "one.json").read_bytes()
    assert json.loads(latest) == {"name": "one", "run": 2} and history[-1][1].content == latest
    with pytest.raises(UsageError, match="NAME must be a nonempty plain name"):
        probe("a/b")(config(tmp_path), store=store)


# -- "Plotting helpers accept CPU data and never decide what to gather." (A11) --------------------------
def test_plotting_helpers_are_reachable_on_the_analysis_accept_cpu_data_and_leave_rcparams_alone(tmp_path):
    assert AnalysisBase.heatmap is lenscope.plots.heatmap and AnalysisBase.line is lenscope.plots.line
    assert AnalysisBase.bar is lenscope.plots.bar and AnalysisBase.scatter is lenscope.plots.scatter

    def every_helper(self, results):
        norm = results["norm"]
        k = np.arange(len(norm))
        self.figures = [self.heatmap(np.outer(norm, norm), xlabel="k", ylabel="k"), self.line(k, norm),
                        self.bar([str(i) for i in k], norm), self.scatter(k, norm)]
        with pytest.raises(UsageError, match="jax.Array"):
            self.line(k, jax.numpy.asarray(norm))
        return self.figures[0]

    before = dict(matplotlib.rcParams)
    analysis, node, _ = run(tmp_path, probe("helpers", output=every_helper))
    assert dict(matplotlib.rcParams) == before
    assert all(isinstance(f, matplotlib.figure.Figure) for f in analysis.figures)
    assert analysis.figures[0].axes[0].get_xlabel() == "k"
    assert results_file(tmp_path, node, "helpers.pdf").read_bytes().startswith(b"%PDF")
