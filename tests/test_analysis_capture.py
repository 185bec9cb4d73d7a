"""Selection and capture in an analysis job (seed 000, A3-A6): one compiled trace of the real grokking model.

Each test is named after the seed sentence it checks; real grokking models, real stores.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from analysis_probes import config, probe
from conftest import xla_compilations

from lenscope.capture import CaptureError, abstract
from lenscope.errors import UsageError
from lenscope.examples.grokking_analyses import AttentionAnalysis, embedding_spectrum
from lenscope.models.transformer import MLP, Attention
from lenscope.runner import run_job
from lenscope.store import Store

PATHS = ["", "embed", "blocks_0", "blocks_0/attn", "blocks_0/attn/query", "blocks_0/attn/key", "blocks_0/attn/value",
         "blocks_0/attn/out", "blocks_0/mlp", "blocks_0/mlp/fc_in", "blocks_0/mlp/fc_out", "unembed"]


def set_up(tmp_path, cls, *extra):
    analysis = cls(config(tmp_path, *extra), store=tmp_path / "runs")
    analysis.setup()
    return analysis


# -- "Implement select(paths), analyze(layer, inputs), and plot(results)." ------------------------------
def test_implement_select_analyze_plot_select_sees_every_discovered_path_in_call_order(tmp_path):
    analysis = set_up(tmp_path, probe("seen"))
    assert analysis.offered == PATHS  # root is "", then calls in order
    analysis.run()
    assert analysis.events[:3] == ["select", "on_analysis_start", "analyze"] and "plot" in analysis.events
    analysis.cleanup()


def test_target_filters_which_module_calls_are_discovered(tmp_path):
    analysis = set_up(tmp_path, probe("targeted", TARGET=Attention, CHOICE="blocks_0/attn",
                                      reduce=lambda self, layer, inputs: {"n": jnp.asarray(1)}))
    assert analysis.offered == ["blocks_0/attn"]
    analysis.cleanup()
    two = set_up(tmp_path, probe("two_kinds", TARGET=(MLP, nn.Embed), CHOICE="embed"), "model/n_layers=2")
    assert two.offered == ["embed", "blocks_0/mlp", "blocks_1/mlp"]
    two.cleanup()


# -- "select() may return a string or a nonempty list of strings." ---------------------------------------
# -- "A list supplies parallel lists of bound modules and DebugInputs to analyze(), in selection order;
#     even a one-item list stays a list." --------------------------------------------------------------
def test_select_may_return_a_string_analyze_gets_one_bound_module_and_its_debug_inputs(tmp_path):
    analysis = set_up(tmp_path, probe("single"))
    results = analysis.compute()
    [(kind, seen)] = analysis.seen
    assert kind == "one" and seen == {"path": "embed", "type": "Embed", "args": ["inputs"], "traced": True,
                                      "is_debug_inputs": True}
    expected = np.abs(np.fft.rfft(np.asarray(analysis.state.params["embed"]["embedding"])[:23], axis=0))
    np.testing.assert_allclose(results["norm"], np.sqrt((expected**2).sum(-1)), rtol=1e-4)
    analysis.cleanup()


def test_a_list_supplies_parallel_lists_of_bound_modules_and_debug_inputs_in_selection_order(tmp_path):
    order = ["blocks_0/mlp", "embed", "blocks_0/attn"]  # not call order
    analysis = set_up(tmp_path, probe("listed", CHOICE=order))
    assert analysis.compute() == {"count": 3}
    [(kind, seen)] = analysis.seen
    assert kind == "list" and [s["path"] for s in seen] == order
    assert [s["type"] for s in seen] == ["MLP", "Embed", "Attention"]
    assert [s["args"] for s in seen] == [["x"], ["inputs"], ["x", "mask", "return_pattern", "context", "keyed"]]
    analysis.cleanup()


def test_even_a_one_item_list_stays_a_list(tmp_path):
    analysis = set_up(tmp_path, probe("one_item", CHOICE=["embed"]))
    assert analysis.compute() == {"count": 1}
    [(kind, seen)] = analysis.seen
    assert kind == "list" and [s["path"] for s in seen] == ["embed"]
    analysis.cleanup()


@pytest.mark.parametrize("choice, problem", [
    ([], "got an empty list"),
    ("blocks_0/atn", r"unknown path 'blocks_0/atn' \(did you mean blocks_0/attn,"),
    (3, "got int 3"),
    (["embed", 4], "item 1 is int 4"),
    (None, "got NoneType None"),
])
def test_anything_else_is_an_error_listing_discovered_paths_before_any_compute(tmp_path, choice, problem):
    cls = probe("bad", CHOICE=choice)
    analysis = cls(config(tmp_path), store=tmp_path / "runs")
    with pytest.raises(CaptureError, match=problem) as caught:
        run_job(analysis)
    message = str(caught.value)
    assert "Discovered: '' (root), 'embed', 'blocks_0', 'blocks_0/attn'" in message and "\n" not in message
    assert isinstance(caught.value, UsageError)
    assert analysis.events == ["select"]  # nothing traced or compiled
    assert Store(tmp_path / "runs").query().all() == []  # and nothing written: not even the node
    assert not (tmp_path / "results").exists()


# -- "The first invocation of each path is captured inside one compiled trace." --------------------------
def test_the_bound_module_is_usable_inside_analyze(tmp_path):
    def rerun(self, layer, inputs):
        again = layer(**inputs)  # the bound MLP, called inside the same trace
        return {"x": inputs.x, "again": again, "hidden": nn.relu(layer.fc_in(inputs.x)).mean()}

    analysis = set_up(tmp_path, probe("rerun", CHOICE="blocks_0/mlp", reduce=rerun))
    results = analysis.compute()
    params = analysis.state.params["blocks_0"]["mlp"]
    mlp = MLP(d_model=32, d_mlp=64)
    np.testing.assert_allclose(results["again"], mlp.apply({"params": params}, results["x"]), rtol=1e-5, atol=1e-6)
    assert results["x"].shape == (analysis.data.size("validation"), 3, 32) and results["hidden"] > 0
    analysis.cleanup()


def test_debug_inputs_bind_arguments_by_name_with_defaults_applied(tmp_path):
    def inputs_of_attention(self, layer, inputs):
        assert inputs["return_pattern"] is False and inputs.return_pattern is False  # the default, applied
        y, pattern = inputs.call(layer, return_pattern=True)
        return {"mask": inputs.mask, "same_mask": inputs["mask"], "pattern": pattern[:2], "y": y[:2]}

    analysis = set_up(tmp_path, probe("bound", CHOICE="blocks_0/attn", reduce=inputs_of_attention))
    results = analysis.compute()
    np.testing.assert_array_equal(results["mask"], np.tril(np.ones((3, 3), bool)))
    np.testing.assert_array_equal(results["same_mask"], results["mask"])
    np.testing.assert_allclose(results["pattern"].sum(-1), 1.0, rtol=1e-5)
    assert results["y"].shape == (2, 3, 32)
    analysis.cleanup()


def twice(self, state, batch, key):
    """A forward that applies the model twice: the second call sees the tokens reversed."""
    def apply(tokens):
        return self.model.apply({"params": state.params}, tokens)

    return apply(batch["inputs"]), apply(batch["inputs"][:, ::-1])


def test_the_first_invocation_of_each_path_is_captured_when_called_twice(tmp_path):
    def tokens_and_rerun(self, layers, inputs):
        logits = layers[0](**inputs[0])  # a call made by analyze: not captured again
        return {"root_tokens": inputs[0].tokens, "embed_tokens": inputs[1].inputs, "logits": logits}

    analysis = set_up(tmp_path, probe("twice", CHOICE=["", "embed"], trace=twice, reduce=tokens_and_rerun))
    results = analysis.compute()
    tokens = np.asarray(analysis.analysis_batch()["inputs"])
    np.testing.assert_array_equal(results["root_tokens"], tokens)  # not the reversed second call
    np.testing.assert_array_equal(results["embed_tokens"], tokens)
    first, _ = twice(analysis, analysis.state, analysis.analysis_batch(), None)
    np.testing.assert_allclose(results["logits"], first, rtol=1e-5, atol=1e-5)
    assert analysis.events.count("analyze") == 1
    analysis.cleanup()


def test_an_executable_compiled_from_shapes_serves_the_arrays_and_a_new_shape_compiles_once_more(tmp_path):
    analysis = set_up(tmp_path, probe("shapes"))
    batch, key = analysis.analysis_batch(), analysis.analysis_key()
    ahead = analysis.executable(abstract(analysis.state), abstract(batch), abstract(key))  # as the tandem warm-up
    assert analysis.compilations == 1
    with xla_compilations() as compiled:
        results = analysis.compute(batch, key)
    assert analysis.executable(analysis.state, batch, key) is ahead
    assert analysis.compilations == 1 and not [name for name, _ in compiled if name.startswith("capture")]
    expected = embedding_spectrum(analysis.state.params["embed"]["embedding"], analysis.args.p)
    np.testing.assert_allclose(results["norm"], np.asarray(expected), rtol=1e-5)
    analysis.compute({name: value[:8] for name, value in batch.items()}, key)  # another batch shape
    assert analysis.compilations == 2
    analysis.compute(batch, key)
    assert analysis.compilations == 2
    analysis.cleanup()


def test_capture_happens_inside_one_compiled_trace_and_a_second_run_compiles_nothing(tmp_path):
    analysis = set_up(tmp_path, probe("cached", output=lambda self, results: {"n": len(results["norm"])}))
    with xla_compilations() as compiled:
        analysis.run()
    assert analysis.compilations == 1 and analysis.seen[0][1]["traced"]  # analyze saw tracers: it ran under jit
    assert [name for name, _ in compiled if name.startswith("capture")] == ["capture_analyze"]
    with xla_compilations() as compiled:
        analysis.run()
        analysis.compute(batch=analysis.analysis_batch())  # a freshly placed batch: still no recompilation
    assert analysis.compilations == 1 and not [name for name, _ in compiled if name.startswith("capture")]
    assert analysis.events.count("analyze") == 1 and analysis.events.count("select") == 1
    assert analysis.events.count("plot") == 2
    analysis.cleanup()


def test_a_selected_path_the_trace_no_longer_calls_is_a_clear_error(tmp_path):
    def maybe_without_mlp(self, state, batch, key):
        if not self.skip:
            return self.model.apply({"params": state.params}, batch["inputs"])
        return self.model.apply({"params": state.params}, batch["inputs"], method=lambda m, t: m.embed(t))

    cls = probe("vanishing", CHOICE="blocks_0/mlp", trace=maybe_without_mlp, skip=False)
    analysis = set_up(tmp_path, cls)
    analysis.skip = True
    with pytest.raises(CaptureError, match=r"selected path\(s\) 'blocks_0/mlp' never called by the traced forward; "
                                           r"paths it called: 'embed'"):
        analysis.compute()
    analysis.cleanup()


# -- A6: analyze() returns arrays, scalars or None --------------------------------------------------------
def test_analyze_returning_a_non_array_leaf_is_an_error_naming_it(tmp_path):
    cls = probe("leaky", reduce=lambda self, layer, inputs: {"ok": layer.embedding.sum(), "note": ["fine", "text"]})
    with pytest.raises(UsageError, match=r"analyze\(\) result leaf \['note'\]\[0\] is a str"):
        run_job(cls, config(tmp_path), store=tmp_path / "runs")
    store = Store(tmp_path / "runs")
    assert store.query().artifact().select() == [] and not (tmp_path / "results").exists()


def test_built_in_attention_analysis_is_a_list_selection_of_every_attention_module(tmp_path):
    analysis = set_up(tmp_path, AttentionAnalysis, "model/n_layers=2", "analysis/examples=3")
    assert analysis.selection(analysis.analysis_batch(), jax.random.PRNGKey(0)) == (["blocks_0/attn", "blocks_1/attn"],
                                                                                   True)
    results = analysis.compute()
    assert results["mean"].shape == (2, 2, 3, 3) and results["examples"].shape == (3, 2, 2, 3, 3)
    np.testing.assert_allclose(results["examples"].sum(-1), 1.0, rtol=1e-5)
    analysis.cleanup()
