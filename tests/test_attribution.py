"""Attribution graphs: the replacement model is the model, every error and token edge and sampled feature edges
match an actual intervention in the frozen model, influence ordering keeps rows exact, programs are compiled once,
and the op leaves circuit-tracer's graph file and a node table on the node."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the shared tiny models and transcoders

from _attribution_models import reference_model, transcoders  # noqa: E402
from _peer_common import Shape  # noqa: E402

import lenscope  # noqa: E402
from lenscope.attribution import Attributor, ReferenceTransformer, edge_errors, prune  # noqa: E402
from lenscope.attribution.ops import graph_of, replacement_model  # noqa: E402
from lenscope.errors import UsageError  # noqa: E402

SHAPE = Shape(layers=2, d_model=16, heads=2, seq=8, batch=1, vocab=20)
PROMPT = np.array([0, 5, 3, 7, 2, 9, 4])
ATOL = 1e-4


@pytest.fixture(scope="module")
def setup():
    model, params = reference_model(SHAPE)
    replacement = ReferenceTransformer.of(model, lambda p: model.bind({"params": p}))
    attributor = Attributor(replacement, transcoders(SHAPE.layers, SHAPE.d_model, 32))
    graph = attributor.graph(params, PROMPT, batch_size=32, progress=False)
    return model, params, attributor, graph


def check_columns(attributor, params, graph, n_sampled, seed=0, skip_positions=1):
    """Every error and token column and `n_sampled` feature columns; returns (columns checked, worst error)."""
    n_feat = graph.n_features
    rest = np.arange(n_feat, graph.adjacency.shape[0] - len(graph.logit_targets))
    sampled = np.random.default_rng(seed).choice(n_feat, size=min(n_sampled, n_feat), replace=False)
    columns = np.concatenate([rest, sampled])
    return columns, edge_errors(attributor, params, graph, columns, skip_positions)


def test_the_replacement_model_is_the_model(setup):
    model, params, attributor, _ = setup
    clean = attributor.model.clean(params, jnp.asarray(PROMPT))
    np.testing.assert_allclose(clean.logits, model.apply({"params": params}, PROMPT[None])[0], atol=1e-5)
    d = SHAPE.d_model
    frozen = attributor.model.frozen(params, jnp.asarray(PROMPT), clean.frozen, clean.mlp_out,
                                     jnp.zeros((len(PROMPT), d)), jnp.zeros((SHAPE.layers, len(PROMPT), d)))
    np.testing.assert_allclose(frozen.mlp_in, clean.readout.mlp_in, atol=1e-6)
    np.testing.assert_allclose(frozen.final, clean.readout.final, atol=1e-6)


def test_every_error_and_token_edge_and_sampled_feature_edges_match_interventions(setup):
    _, params, attributor, graph = setup
    assert graph.n_features >= 100  # enough active features to sample 100 columns
    columns, errors = check_columns(attributor, params, graph, 100)
    assert errors.shape == (graph.n_features + len(graph.logit_targets), len(columns))
    assert errors.max() <= ATOL, f"worst edge off by {errors.max():.2e}"
    assert np.abs(graph.adjacency[:, columns]).max() > 0.1  # the edges checked are not all zero


def test_the_check_catches_a_wrong_edge(setup):
    _, params, attributor, graph = setup
    column = graph.n_features + 3  # an error node at layer 0
    target = int(np.argmax(np.abs(graph.adjacency[:, column])))
    bad = graph.adjacency.copy()
    bad[target, column] += 1e-3
    wrong = type(graph)(**{**graph.__dict__, "adjacency": bad})
    assert edge_errors(attributor, params, wrong, [column]).max() > 5e-4


def test_influence_ordering_keeps_exact_rows_and_compiles_once(setup):
    _, params, attributor, full = setup
    before = attributor.compilations
    part = attributor.graph(params, PROMPT, batch_size=32, max_feature_nodes=12, update_interval=1,
                            progress=False)
    # one setup program and, for batch 32, one edge program per layer group: features of layer 0, of layer 1, and
    # the logits' (the whole readout)
    assert attributor.compilations == before == 4
    assert len(part.selected_features) == 12
    keep = np.concatenate([part.selected_features, np.arange(full.n_features, full.adjacency.shape[0])])
    rows = np.concatenate([part.selected_features,
                           np.arange(full.adjacency.shape[0] - len(full.logit_targets), full.adjacency.shape[0])])
    part_rows = np.concatenate([np.arange(12), np.arange(part.adjacency.shape[0] - len(part.logit_targets),
                                                         part.adjacency.shape[0])])
    np.testing.assert_allclose(part.adjacency[part_rows], full.adjacency[np.ix_(rows, keep)], atol=1e-6)
    # the first features expanded are the ones the logit rows point at most strongly
    logit_rows = full.adjacency[-len(full.logit_targets):, :full.n_features]
    direct = (np.abs(logit_rows) / np.abs(logit_rows).sum(1, keepdims=True) * full.logit_probabilities[:, None])
    assert int(np.argmax(direct.sum(0))) in set(part.selected_features.tolist())


def test_layer_groups_change_programs_not_rows(setup):
    _, params, attributor, graph = setup
    one = Attributor(attributor.model, attributor.transcoders, layer_groups=1)
    same = one.graph(params, PROMPT, batch_size=32, progress=False)
    assert one.compilations == 2  # one setup program, one edge program: every backward pass through all layers
    np.testing.assert_allclose(same.adjacency, graph.adjacency, rtol=1e-5, atol=1e-6)
    assert [attributor.top(layer) for layer in range(SHAPE.layers + 1)] == [1, 2, None]
    with pytest.raises(UsageError, match="layer_groups must be >= 1"):
        Attributor(attributor.model, attributor.transcoders, layer_groups=0)


def test_pruning_keeps_tokens_and_logits(setup):
    _, _, _, graph = setup
    pruned = prune(graph.adjacency, graph.logit_probabilities, graph.n_features, graph.n_pos)
    tail = len(graph.logit_targets) + graph.n_pos
    assert pruned.node_mask[-tail:].all() and 0 < pruned.node_mask[:-tail].sum() < graph.adjacency.shape[0] - tail
    inner = ~pruned.node_mask[:-tail]  # a dropped feature or error node: no kept edge leaves it
    assert not pruned.edge_mask[:, :-tail][:, inner].any()
    with pytest.raises(UsageError, match="node_threshold must be a fraction"):
        prune(graph.adjacency, graph.logit_probabilities, graph.n_features, graph.n_pos, node_threshold=1.5)


def test_bad_inputs_are_refused_by_name(setup):
    model, params, attributor, _ = setup
    with pytest.raises(UsageError, match="one transcoder per layer: the model has 2 layers, got 1"):
        Attributor(attributor.model, transcoders(1, SHAPE.d_model, 8))
    with pytest.raises(UsageError, match=r"skip_positions must be in \[0, 7\)"):
        attributor.graph(params, PROMPT, skip_positions=7, progress=False)
    with pytest.raises(UsageError, match="lacks W_enc"):
        Attributor(attributor.model, [object(), object()])


GROK = ["data/p=11", "model/d_model=16", "model/d_mlp=64", "model/n_heads=2", "model/d_head=8"]


@pytest.fixture(scope="module")
def grok(tmp_path_factory):
    from lenscope.examples.grokking import GrokTrainer

    root = tmp_path_factory.mktemp("grok")
    trainer = GrokTrainer([*GROK, f"store/url={root}/store", f"logging/results={root}/results"])
    return trainer, transcoders(1, 16, 128, bias=0.5)


def test_grokking_transformer_graph_matches_interventions(grok):
    trainer, tcs = grok
    out = lenscope.ops.compute_attribution_graph(trainer, transcoders=tcs, skip_positions=0, batch_size=64)
    graph, _ = graph_of(out)
    attributor = Attributor(replacement_model(trainer), tcs)
    assert graph.n_features >= 100
    _, errors = check_columns(attributor, trainer.state.params, graph, 100, skip_positions=0)
    assert errors.max() <= ATOL
    assert 0.0 <= float(out.replacement_score) <= 1.0 and 0.0 <= float(out.completeness_score) <= 1.0


def test_the_op_on_a_linen_trainer_saves_programs_a_later_attributor_loads(grok, tmp_path):
    """lenscope binds a plain linen trainer's model itself, so the op's programs are saved (attribution/saved.py)
    and a later Attributor, as the next process's op would, loads them and draws the same graph; a trainer with a
    `module` of its own keeps JAX's cache only."""
    from lenscope.examples.grokking import GrokTrainer

    trainer, tcs = grok
    assert trainer.binding_key() is not None and replacement_model(trainer).program_key == trainer.binding_key()
    out = lenscope.ops.compute_attribution_graph(trainer, transcoders=tcs, skip_positions=0, batch_size=64,
                                                 example=1)
    graph, _ = graph_of(out)
    later = Attributor(replacement_model(trainer), tcs)
    again = later.graph(trainer.state.params, graph.input_tokens, skip_positions=0, batch_size=64, progress=False)
    assert later.loaded == later.compilations >= 2
    np.testing.assert_array_equal(again.active_features, graph.active_features)
    np.testing.assert_allclose(again.adjacency, graph.adjacency, atol=1e-6)

    class Custom(GrokTrainer):
        def module(self, params, *args, **kwargs):
            return super().module(params, *args, **kwargs)

    custom = Custom([*GROK, f"store/url={tmp_path}/store", f"logging/results={tmp_path}/results"])
    assert custom.binding_key() is None and replacement_model(custom).program_key is None


def test_a_text_prompt_on_a_model_without_a_tokenizer_is_refused_by_name(grok):
    trainer, tcs = grok
    with pytest.raises(UsageError, match=r"prompt='1 \+ 2' is text.*pass prompt=\[token ids\]"):
        lenscope.ops.compute_attribution_graph(trainer, transcoders=tcs, prompt="1 + 2")


def test_the_op_saves_the_graph_file_and_node_table(grok):
    trainer, tcs = grok
    cfg = lenscope.AnalysisCfg(analysis="compute_attribution_graph", params={"transcoders": tcs, "example": 2})
    entry = trainer.run_analysis(cfg).entry("compute_attribution_graph")
    assert entry.artifacts == ("compute_attribution_graph", "compute_attribution_graph.parquet")
    store = trainer.store
    document = json.loads(store.get(entry.node).artifacts["compute_attribution_graph"].content)
    assert {"metadata", "qParams", "nodes", "links"} <= set(document)
    kinds = {node["feature_type"] for node in document["nodes"]}
    assert {"embedding", "logit"} <= kinds
    table = lenscope.load_table(store, entry.node, "compute_attribution_graph")
    assert table.num_rows == len(document["nodes"])
    assert sum(len(w) for w in table["weights"]) == len(document["links"])


def test_the_pipeline_composes_through_input_store(grok):
    trainer, tcs = grok
    graph = lenscope.ops.compute_attribution_graph(trainer, transcoders=tcs, skip_positions=0, example=1)
    out = trainer.run_analysis(
        lenscope.AnalysisCfg(analysis="compute_attribution_graph",
                             params={"transcoders": tcs, "skip_positions": 0, "example": 1}),
        lenscope.AnalysisCfg(analysis="graph_node_influence", input_store="compute_attribution_graph"),
        lenscope.AnalysisCfg(analysis="extract_top_features", input_store="graph_node_influence",
                             params={"top_k": 4}),
        lenscope.AnalysisCfg(analysis="feature_intervention_forward", input_store="extract_top_features",
                             params={"transcoders": tcs, "skip_positions": 0, "example": 1}))
    influence, top, moved = (out[name] for name in ("graph_node_influence", "extract_top_features",
                                                    "feature_intervention_forward"))
    assert np.all(np.diff(influence["influence"]) <= 0) and len(top["feature"]) == 4
    assert (out.entry("feature_intervention_forward").artifacts
            == ("feature_intervention_forward.parquet",))
    # one layer, no LayerNorm: ablating a last-position feature moves the top logit node by minus its edge
    g, _ = graph_of(graph)
    logits = trainer.module(trainer.state.params)(jnp.asarray(g.input_tokens)[None])[0, -1]
    assert g.logit_targets[0] == int(np.argmax(logits)) == moved["top_token"][0]
    for layer, pos, feat, change in zip(top["layer"], top["ctx_idx"], top["feature"],
                                        moved["demeaned_top_logit_change"]):
        column = next(i for i, s in enumerate(g.selected_features)
                      if tuple(g.active_features[s]) == (layer, pos, feat))
        assert pos == g.n_pos - 1
        assert change == pytest.approx(-g.adjacency[-len(g.logit_targets), column], abs=ATOL)
    same = lenscope.ops.feature_intervention_forward(trainer, transcoders=tcs, skip_positions=0, example=1,
                                                     features=[tuple(top[k][0] for k in ("layer", "ctx_idx",
                                                                                          "feature"))], scale=1.0)
    assert same["max_abs_logit_change"][0] == 0.0  # scale 1 changes nothing


def test_the_attributor_cache_keys_by_the_setting_itself_not_its_id():
    """A transcoders setting is matched by identity while the cache holds it (an id alone could be reused by a new
    object once the old one is freed), and a path or name by equality."""
    from pathlib import Path

    from lenscope.attribution.ops import _same_setting

    first = [object()]
    assert _same_setting(first, first) and not _same_setting(first, list(first))
    assert _same_setting("node@abc:1", "node@abc:1") and _same_setting(Path("a/b"), Path("a/b"))
    assert not _same_setting("a/b", Path("a/b")) and not _same_setting(None, first)
