"""Attribution graphs against an independent dense recomputation (tests/attribution_oracle.py: float64 NumPy from the
parameters, no lenscope.attribution code): every edge of the graph, not only those `edge_errors` samples through
the same frozen forward that built the graph, and a frozen-forward bug that `edge_errors` cannot see."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from attribution_oracle import Oracle, dense_graph

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the shared tiny models and transcoders

from _attribution_models import reference_model, transcoders  # noqa: E402
from _peer_common import Shape  # noqa: E402

from lenscope.attribution import Attributor, ReferenceTransformer, edge_errors  # noqa: E402

SHAPE = Shape(layers=2, d_model=16, heads=2, seq=8, batch=1, vocab=20)
PROMPT = np.array([0, 5, 3, 7, 2, 9, 4])


class HalvedEmbeddings(ReferenceTransformer):
    """A wrong replacement model: its frozen forward adds half of each embedding delta (the edges from token nodes
    come out halved, and a check through this same forward agrees with them)."""

    def frozen(self, params, tokens, frozen, mlp_out, embed_delta, mlp_delta, layers=None):
        return super().frozen(params, tokens, frozen, mlp_out, 0.5 * embed_delta, mlp_delta, layers)


@pytest.fixture(scope="module")
def model():
    return reference_model(SHAPE)


def graph_of(model_cls, model):
    definition, params = model
    replacement = model_cls.of(definition, lambda p: definition.bind({"params": p}))
    attributor = Attributor(replacement, transcoders(SHAPE.layers, SHAPE.d_model, 32))
    return attributor, attributor.graph(params, PROMPT, batch_size=32, progress=False)


def dense_mismatch(graph, params) -> float:
    """The largest |graph edge - dense edge| over every target row and every source column (feature, error,
    token), after checking that both found the same active features."""
    features, values, rows = dense_graph(params, PROMPT, transcoders(SHAPE.layers, SHAPE.d_model, 32),
                                         graph.logit_targets)
    np.testing.assert_array_equal(graph.active_features, features)
    np.testing.assert_allclose(graph.activation_values, values, rtol=1e-4, atol=1e-5)
    n, n_logits = graph.adjacency.shape[0], len(graph.logit_targets)
    targets = np.concatenate([graph.selected_features, np.arange(n - n_logits, n)])
    sources = n - n_logits
    assert not graph.adjacency[graph.n_features: n - n_logits].any()  # error and token nodes have no inputs
    assert not graph.adjacency[:, sources:].any()  # logit nodes have no outputs
    scale = np.abs(rows).max()
    assert scale > 0.1  # edges worth checking
    return float(np.abs(graph.adjacency[np.ix_(targets, np.arange(sources))] - rows).max() / scale)


def test_the_oracle_s_forward_is_the_model(model):
    definition, params = model
    oracle = Oracle(params, PROMPT, SHAPE.layers)
    np.testing.assert_allclose(oracle.logits, np.asarray(definition.apply({"params": params}, PROMPT[None])[0]),
                               rtol=1e-4, atol=1e-4)


def test_every_edge_matches_the_independent_dense_graph(model):
    _, graph = graph_of(ReferenceTransformer, model)
    assert graph.n_features >= 100
    assert dense_mismatch(graph, model[1]) < 1e-5  # float32 graph against float64 edges, relative to the largest


def test_a_frozen_forward_bug_passes_edge_errors_but_not_the_dense_check(model):
    attributor, graph = graph_of(HalvedEmbeddings, model)
    tokens = np.arange(graph.adjacency.shape[0] - len(graph.logit_targets) - graph.n_pos,
                       graph.adjacency.shape[0] - len(graph.logit_targets))
    assert edge_errors(attributor, model[1], graph, tokens).max() <= 1e-4  # the same forward agrees with itself
    assert dense_mismatch(graph, model[1]) > 1e-2
