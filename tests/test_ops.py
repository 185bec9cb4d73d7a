"""The op registry and lazy notebook wrappers (D5), and the general analyses on different linen models."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

import lenscope.ops
from lenscope.analysis.builtin import OpAnalysis
from lenscope.capture import CaptureError
from lenscope.errors import UsageError
from lenscope.examples.grokking import GrokTrainer

sys.path.insert(0, str(Path(__file__).parent))
from table_jobs import FlaxAttentionTrainer, WideTrainer

BUILTINS = ["ablation", "activation_patching", "activation_stats", "attention_patterns", "attribution_patching",
            "concept_direction", "logit_lens", "steering", "weight_spectrum"]
# built in too, but they need transcoders or graphs: not run on the plain grokking model
ATTRIBUTION = ["compare_attribution_graphs", "compute_attribution_graph", "extract_top_features",
               "feature_intervention_forward", "feature_tracks", "graph_node_influence"]


@pytest.fixture(scope="module")
def grok(tmp_path_factory):
    """A grokking trainer on initialized state (set up by the first op call)."""
    from conftest import TINY

    root = tmp_path_factory.mktemp("ops")
    trainer = GrokTrainer(TINY + [f"logging/results={root / 'results'}"], store=root / "runs")
    lenscope.ops.weight_spectrum(trainer)
    return trainer


def test_wrappers_are_made_on_first_use_without_importing_the_analyses():
    script = textwrap.dedent("""
        import sys, lenscope.ops as ops
        loaded = lambda: sorted(m for m in sys.modules if m.startswith("lenscope.analysis.builtin"))
        before = loaded()
        wrapper = ops.logit_lens
        print(before, loaded(), wrapper is ops.logit_lens, "logit_lens" in vars(ops), repr(wrapper),
              sorted(ops.names()))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"[] [] True False <lenscope op logit_lens> {sorted(BUILTINS + ATTRIBUTION)}"


def test_unknown_ops_and_registration():
    with pytest.raises(AttributeError, match="no op 'activation_stat'.*did you mean activation_stats"):
        _ = lenscope.ops.activation_stat
    assert set(BUILTINS) <= set(dir(lenscope.ops))
    with pytest.raises(UsageError, match="identifiers"):
        lenscope.ops.register("not-an-identifier")
    with pytest.raises(UsageError, match="would hide"):
        lenscope.ops.register("names")

    @lenscope.ops.register("embedding_norm")
    class EmbeddingNorm(OpAnalysis):
        NAME = "embedding_norm"
        DEFAULT_FILTER = "embed"

        def analyze(self, layers, inputs):
            return {"norm": jax.numpy.linalg.norm(layers[0].embedding)}

    assert lenscope.ops.get("embedding_norm") is EmbeddingNorm
    assert "embedding_norm" in lenscope.ops.names()
    with pytest.raises(UsageError, match="taken"):
        lenscope.ops.register("embedding_norm")(OpAnalysis)


def test_activation_stats_match_the_eager_debugger(grok):
    stats = lenscope.ops.activation_stats(grok, names_filter="**/fc_in")
    with grok.debug("blocks_0/mlp/fc_in", grok.batch("validation", 0)) as (layer, inputs):
        y = np.asarray(inputs.call(layer)).reshape(-1, 64)
    got = stats["blocks_0/mlp/fc_in"]
    np.testing.assert_allclose(got["mean"], y.mean(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got["std"], y.std(), rtol=1e-4)
    np.testing.assert_allclose(got["norm"], np.linalg.norm(y, axis=-1).mean(), rtol=1e-4)
    assert got["dead_fraction"] == np.mean(np.all(y <= 0, axis=0))
    relu = lenscope.ops.activation_stats(grok, names_filter="embed")["embed"]
    assert 0 <= relu["dead_fraction"] <= 1


def test_attention_patterns_match_the_sown_patterns(grok):
    out = lenscope.ops.attention_patterns(grok, examples=3)["blocks_0/attn"]
    batch = grok.batch("validation", 0)
    _, state = grok.model.apply({"params": grok.state.params}, batch["inputs"], mutable=["intermediates"])
    sown = np.asarray(state["intermediates"]["blocks_0"]["attn"]["pattern"][0])
    np.testing.assert_allclose(out["mean"], sown.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["examples"], sown[:3], rtol=1e-5, atol=1e-6)
    p = sown.astype(np.float64)
    entropy = -(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0)).sum(-1).mean(0)
    np.testing.assert_allclose(out["entropy"], entropy, rtol=1e-4, atol=1e-6)
    assert np.all(out["entropy"][:, 0] == 0)  # the first query attends only to itself (causal mask)


def test_attention_patterns_on_flax_multi_head_attention(tmp_path):
    trainer = FlaxAttentionTrainer(["training/batch_size=32", f"logging/results={tmp_path}"], store=tmp_path / "runs")
    out = lenscope.ops.attention_patterns(trainer)["mha"]
    assert out["mean"].shape == (2, 4, 4) and out["entropy"].shape == (2, 4)
    np.testing.assert_allclose(out["mean"].sum(-1), 1.0, rtol=1e-5)
    assert np.all(out["entropy"] > 0)  # no causal mask here: every query spreads over several keys


def test_logit_lens_ends_at_the_models_own_prediction(grok):
    lens = lenscope.ops.logit_lens(grok)
    assert sorted(lens) == ["blocks_0 (input)", "blocks_0 (output)"]
    final = lens["blocks_0 (output)"]
    assert final["kl"] == pytest.approx(0, abs=1e-6) and final["agreement"] == 1
    logits = np.asarray(grok.model.apply({"params": grok.state.params}, grok.batch("validation", 0)["inputs"]))[:, -1]
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    np.testing.assert_allclose(final["final_token_prob"], probs.max(-1).mean(), rtol=1e-4)
    assert lens["blocks_0 (input)"]["kl"] > 0
    first = lenscope.ops.logit_lens(grok, position=0)["blocks_0 (output)"]
    assert first["kl"] == pytest.approx(0, abs=1e-6) and first["final_token_prob"] != final["final_token_prob"]


def test_logit_lens_needs_a_trainer_unembedding(tmp_path):
    trainer = WideTrainer(["training/batch_size=32", f"logging/results={tmp_path}"], store=tmp_path / "runs")
    with pytest.raises(UsageError, match="declares no unembed"):
        lenscope.ops.logit_lens(trainer, names_filter="dense_*")


def test_weight_spectrum_is_the_svd_of_each_kernel(grok):
    spectrum = lenscope.ops.weight_spectrum(grok)
    params = jax.device_get(grok.state.params)
    assert sorted(spectrum) == sorted(f"{p}/kernel" for p in ["blocks_0/attn/query", "blocks_0/attn/key",
                                      "blocks_0/attn/value", "blocks_0/attn/out", "blocks_0/mlp/fc_in",
                                      "blocks_0/mlp/fc_out", "unembed"])
    out = params["blocks_0"]["attn"]["out"]["kernel"]  # [heads, d_head, d_model]: inputs are (heads, d_head)
    np.testing.assert_allclose(spectrum["blocks_0/attn/out/kernel"],
                               np.linalg.svd(out.reshape(16, 32), compute_uv=False), rtol=1e-4)
    query = params["blocks_0"]["attn"]["query"]["kernel"]  # [d_model, heads, d_head]
    np.testing.assert_allclose(spectrum["blocks_0/attn/query/kernel"],
                               np.linalg.svd(query.reshape(32, 16), compute_uv=False), rtol=1e-4)
    top = lenscope.ops.weight_spectrum(grok, top=2, names_filter="unembed")
    np.testing.assert_allclose(top["unembed/kernel"], spectrum["unembed/kernel"][:2])
    with pytest.raises(CaptureError, match="has a 'kernel'"):
        lenscope.ops.weight_spectrum(grok, names_filter="embed")


def test_general_ops_on_an_mlp_and_their_saved_plots(tmp_path):
    trainer = WideTrainer(["training/batch_size=32", f"logging/results={tmp_path / 'results'}"],
                          store=tmp_path / "runs")
    assert sorted(lenscope.ops.activation_stats(trainer)) == ["dense_0", "dense_1"]
    assert sorted(lenscope.ops.weight_spectrum(trainer)) == ["dense_0/kernel", "dense_1/kernel"]
    with pytest.raises(CaptureError, match="no discovered Attention or MultiHeadDotProductAttention call"):
        lenscope.ops.attention_patterns(trainer)
    out = trainer.run_analysis("activation_stats", "weight_spectrum")
    folder = trainer.results_dir()
    assert json.loads((folder / "activation_stats.json").read_text())["layers"]["dense_0"]["std"] == pytest.approx(
        float(out["activation_stats"]["dense_0"]["std"]))
    assert (folder / "weight_spectrum.pdf").read_bytes()[:5] == b"%PDF-"


def test_every_builtin_op_saves_its_plot_on_the_grokking_model(grok):
    grok.run_analysis(*BUILTINS)
    names = set(grok.store.artifact_names(grok.node))
    assert set(BUILTINS) <= names
    for name in ("attention_patterns", "logit_lens", "weight_spectrum"):
        assert (grok.results_dir() / f"{name}.pdf").is_file()
    assert (grok.results_dir() / "activation_stats.json").is_file()


def test_op_numbers_as_json_summarize_big_arrays_and_drop_non_finite() -> None:
    from lenscope.analysis.builtin.base import MAX_LISTED, numbers

    big = np.arange(MAX_LISTED + 1, dtype=np.float32)
    plain = numbers({"grid": np.ones((2, 3)), "score": np.float32(np.nan), "big": big, "n": np.int64(3)})
    assert plain["grid"] == [[1.0] * 3] * 2 and plain["score"] is None and plain["n"] == 3
    assert plain["big"] == {"shape": [MAX_LISTED + 1], "mean": float(big.mean()), "min": 0.0, "max": float(MAX_LISTED)}
    json.dumps(plain, allow_nan=False)  # strict JSON
