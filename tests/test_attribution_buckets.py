"""Shape buckets of attribution graphs (attribution/padding.py): prompts of several lengths inside one bucket share
one setup program and one edge program per layer group, and each graph (and its graph file) equals the one computed
at the prompt's exact length: the same nodes in the same order, the adjacency within 1e-6 of its largest weight."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from _attribution_models import transcoders  # noqa: E402
from test_attribution_pretrained import FAMILIES  # noqa: E402

from lenscope.attribution import Attributor, ReferenceTransformer, edge_errors, prune  # noqa: E402
from lenscope.attribution.decoder import DecoderReplacement  # noqa: E402
from lenscope.attribution.padding import padded_length  # noqa: E402
from lenscope.attribution.programs import BORROW_LIMIT, Programs  # noqa: E402
from lenscope.attribution.schema import graph_json  # noqa: E402
from lenscope.attribution.shape_record import SHAPES_FILE, ShapeRecord  # noqa: E402
from lenscope.models import Transformer  # noqa: E402
from lenscope.models.pretrained import random_decoder  # noqa: E402

FEATURES = 56  # transcoder width: a shape of its own, so no other test's programs (programs.py) are picked up
LENGTHS = (9, 5, 13)  # one bucket (16 positions: GPT-2's n_positions here); not in increasing order
RELATIVE = 1e-6


def prompt(n: int, vocab: int, seed: int) -> np.ndarray:
    tokens = np.random.default_rng(seed).integers(1, vocab, n)
    tokens[0] = 0  # BOS (skip_positions=1)
    return tokens


def assert_same_graph(padded, exact) -> float:
    """The same nodes in the same order, probabilities and adjacency within RELATIVE; the relative gap."""
    for name in ("input_tokens", "active_features", "selected_features", "logit_targets"):
        np.testing.assert_array_equal(getattr(padded, name), getattr(exact, name), err_msg=name)
    np.testing.assert_allclose(padded.activation_values, exact.activation_values, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(padded.logit_probabilities, exact.logit_probabilities, atol=1e-6)
    assert padded.adjacency.shape == exact.adjacency.shape
    gap = float(np.abs(padded.adjacency - exact.adjacency).max() / np.abs(exact.adjacency).max())
    assert gap <= RELATIVE, f"adjacency off by {gap:.1e} of its largest weight"
    return gap


def assert_same_file(padded, exact) -> None:
    """The graph files: the same nodes (their floats within RELATIVE), the same links (their weights within RELATIVE
    of the largest)."""
    files = [graph_json(g, prune(g.adjacency, g.logit_probabilities, g.n_features, g.n_pos), lambda i: f"t{i}",
                        slug="buckets", scan="test", node_threshold=0.8) for g in (padded, exact)]
    assert [node["node_id"] for node in files[0]["nodes"]] == [node["node_id"] for node in files[1]["nodes"]]
    for ours, theirs in zip(files[0]["nodes"], files[1]["nodes"]):  # influence and activation: float rounding
        assert {k: v for k, v in ours.items() if not isinstance(v, float)} == {
            k: v for k, v in theirs.items() if not isinstance(v, float)}
        assert all(abs(ours[k] - v) <= RELATIVE * max(abs(v), 1.0) for k, v in theirs.items() if isinstance(v, float))
    assert [(x["source"], x["target"]) for x in files[0]["links"]] == [(x["source"], x["target"])
                                                                       for x in files[1]["links"]]
    scale = np.abs(exact.adjacency).max()
    for ours, theirs in zip(files[0]["links"], files[1]["links"]):
        assert abs(ours["weight"] - theirs["weight"]) <= RELATIVE * scale


@pytest.fixture(scope="module")
def decoder():
    return random_decoder(FAMILIES["gpt2"], seed=0, std=0.3)


def test_prompts_of_one_bucket_reuse_one_program_set_and_equal_the_exact_graphs(decoder):
    tcs = transcoders(2, decoder.config.d_model, FEATURES, threshold=0.1)
    bucketed = Attributor(DecoderReplacement.of(decoder, lambda d: d), tcs)
    exact = Attributor(DecoderReplacement.of(decoder, lambda d: d), tcs, buckets=False)
    assert {padded_length(bucketed.model, n) for n in LENGTHS} == {16}
    gaps, compiled = [], []
    for seed, n in enumerate(LENGTHS):
        tokens = prompt(n, decoder.config.vocab_size, seed)
        padded = bucketed.graph(decoder, tokens, batch_size=32, progress=False)
        reference = exact.graph(decoder, tokens, batch_size=32, progress=False)
        assert padded.n_features > 10 * (n - 1)  # real work: features at every position after BOS
        gaps.append(assert_same_graph(padded, reference))
        assert_same_file(padded, reference)
        compiled.append(bucketed.compilations)
    # the first prompt compiles the setup and its layer groups' edge programs (layer-0 features, layer-1 features,
    # logits), the two later lengths nothing; at exact lengths, each length compiles its own
    assert compiled == [4] * len(LENGTHS)
    assert exact.compilations >= 2 * len(LENGTHS)
    # influence-ordered rows go through the same programs, cut the same way
    tokens = prompt(9, decoder.config.vocab_size, 7)  # a length the exact attributor has compiled
    options = dict(batch_size=32, max_feature_nodes=40, update_interval=1, progress=False)
    assert_same_graph(bucketed.graph(decoder, tokens, **options), exact.graph(decoder, tokens, **options))
    assert bucketed.compilations == compiled[-1]
    print(f"largest adjacency gap, relative: {max(gaps):.1e}")


def test_a_padded_graph_matches_interventions(decoder):
    """The edge check (verify.py) runs the frozen forward at the padded length; every error and token column."""
    attributor = Attributor(DecoderReplacement.of(decoder, lambda d: d),
                            transcoders(2, decoder.config.d_model, FEATURES, threshold=0.1))
    graph = attributor.graph(decoder, prompt(6, decoder.config.vocab_size, 3), batch_size=32, progress=False)
    columns = np.arange(graph.n_features, graph.adjacency.shape[0] - len(graph.logit_targets))
    assert edge_errors(attributor, decoder, graph, columns).max() <= 1e-4


def test_the_position_limit_caps_the_bucket():
    """A reference Transformer of 8 learned positions runs every prompt at 8 (the cap; tests/test_attribution_dense.py
    checks such a padded graph against its float64 oracle); grokking's 3 positions are its exact length; a rotary
    decoder has no cap; buckets=False is the exact length."""
    definition = Transformer(vocab_size=20, seq_len=8, d_model=16, n_heads=2, d_head=8, d_mlp=64, n_layers=2)
    view = ReferenceTransformer.of(definition, lambda p: definition.bind({"params": p}))
    assert view.max_positions == 8
    assert [padded_length(view, n) for n in (3, 5, 8)] == [8, 8, 8]
    assert padded_length(view, 5, buckets=False) == 5
    grokking = Transformer(vocab_size=24, seq_len=3, d_model=16, n_heads=2, d_head=8, d_mlp=64, n_layers=1)
    assert padded_length(ReferenceTransformer.of(grokking, lambda p: p), 3) == 3
    llama = DecoderReplacement.of(random_decoder(FAMILIES["llama"], seed=0, std=0.3), lambda d: d)
    assert llama.max_positions is None and padded_length(llama, 40) == 64


def test_a_later_graph_borrows_a_compiled_program_of_a_higher_group(tmp_path):
    programs = Programs([1, 2, 3], 4, ShapeRecord(tmp_path / SHAPES_FILE), "model")
    assert programs.plan("a", [0, 4]) == [1, None]  # a first graph compiles what it needs
    assert programs.plan("a", [1, 2, 4]) == [None, None, None]  # groups 2 and 3 borrow the compiled whole program
    assert programs.plan("a", [1] * BORROW_LIMIT) == [2] * BORROW_LIMIT  # enough batches pay for group 2's own
    assert programs.plan("a", [0, 1]) == [1, 2]
    assert programs.plan("b", [1]) == [2]  # other shapes: nothing compiled to borrow
    again = Programs([1, 2, 3], 4, ShapeRecord(tmp_path / SHAPES_FILE), "model")  # the next process
    assert again.plan("b", [0]) == [2] and again.plan("a", [2]) == [None]  # what the first process compiled
