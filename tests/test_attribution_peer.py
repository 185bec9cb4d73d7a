"""The cross-check against circuit-tracer 0.5 (torch CPU) on one shared tiny model and shared transcoders: the same
active features, logit nodes, adjacency (1e-4 relative), pruning and scores; the graph file validates against
circuit-tracer's own pydantic models.

lenscope's linen weights are copied into a TransformerLens HookedTransformer inside circuit-tracer's replacement
model, and each lenscope Dictionary transcoder into a SingleLayerTranscoder (bench/_ct_peer.py says how).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HOW = "pip install 'torch==2.13.0+cpu' -e '.[circuit]'  (circuit-tracer 0.5, torch CPU)"
# circuit-tracer first: where it is missing (the suite's own environment), torch is not imported at collection
pytest.importorskip("circuit_tracer", reason=f"the circuit-tracer cross-check needs circuit-tracer: {HOW}")
pytest.importorskip("torch", reason=f"the circuit-tracer cross-check needs torch: {HOW}")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import _ct_peer  # noqa: E402
from _attribution_models import reference_model, transcoders  # noqa: E402
from _peer_common import Shape  # noqa: E402
from circuit_tracer.frontend.graph_models import Model  # noqa: E402
from circuit_tracer.graph import compute_graph_scores, prune_graph  # noqa: E402

from lenscope.attribution import Attributor, ReferenceTransformer, graph_scores, prune  # noqa: E402
from lenscope.attribution.schema import graph_json  # noqa: E402

SHAPE = Shape(layers=2, d_model=16, heads=2, seq=8, batch=1, vocab=20)
PROMPT = np.array([0, 5, 3, 7, 2, 9, 4])


@pytest.fixture(scope="module")
def both():
    model, params = reference_model(SHAPE)
    tcs = transcoders(SHAPE.layers, SHAPE.d_model, 32)
    ours = Attributor(ReferenceTransformer.of(model, lambda p: model.bind({"params": p})), tcs)
    return params, ours, _ct_peer.replacement_model(params, SHAPE, tcs)


def assert_same_graph(mine, theirs):
    np.testing.assert_array_equal(mine.active_features, theirs.active_features.numpy())
    np.testing.assert_array_equal(mine.selected_features, theirs.selected_features.numpy())
    np.testing.assert_array_equal(mine.logit_targets, [t.vocab_idx for t in theirs.logit_targets])
    np.testing.assert_allclose(mine.logit_probabilities, theirs.logit_probabilities.numpy(), atol=1e-6)
    adjacency = theirs.adjacency_matrix.numpy()
    scale = np.abs(adjacency).max()
    assert np.abs(mine.adjacency - adjacency).max() <= 1e-4 * scale


def test_same_graph_as_circuit_tracer(both):
    params, ours, peer = both
    mine = ours.graph(params, PROMPT, batch_size=16, progress=False)
    theirs = _ct_peer.graph(peer, PROMPT, batch_size=16)
    assert_same_graph(mine, theirs)
    pruned = prune(mine.adjacency, mine.logit_probabilities, mine.n_features, mine.n_pos)
    node_mask, edge_mask, cumulative = (x.numpy() for x in prune_graph(theirs))
    np.testing.assert_array_equal(pruned.node_mask, node_mask)
    np.testing.assert_array_equal(pruned.edge_mask, edge_mask)
    np.testing.assert_allclose(pruned.cumulative, cumulative, atol=1e-5)
    np.testing.assert_allclose(graph_scores(mine.adjacency, mine.logit_probabilities, mine.n_features,
                                            SHAPE.layers, mine.n_pos), compute_graph_scores(theirs), atol=1e-5)
    document = graph_json(mine, pruned, lambda i: f"t{i}", slug="peer", scan="lenscope-peer", node_threshold=0.8)
    Model.model_validate(document)  # circuit-tracer's frontend schema


def test_same_influence_ordered_subgraph_as_circuit_tracer(both):
    params, ours, peer = both
    mine = ours.graph(params, PROMPT, batch_size=8, max_feature_nodes=20, update_interval=1, progress=False)
    theirs = _ct_peer.graph(peer, PROMPT, batch_size=8, max_feature_nodes=20, update_interval=1)
    assert_same_graph(mine, theirs)


def test_the_peer_sets_hugging_face_offline_mode_itself():
    """Imported without HF_HUB_OFFLINE, bench/_ct_peer.py sets it before transformers loads (no hub lookup)."""
    done = subprocess.run([sys.executable, "-c", "import _ct_peer, os; print(os.environ['HF_HUB_OFFLINE'])"],
                          cwd=Path(__file__).resolve().parents[1] / "bench", capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr[-2000:]
