"""A later prompt with more active features than the first compiles nothing (feature_columns.py: no program shape
depends on the features), and its graph equals the one computed alone, at its exact length in a fresh Attributor."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from _attribution_models import reference_model, transcoders  # noqa: E402
from _peer_common import Shape  # noqa: E402
from test_attribution_buckets import assert_same_graph  # noqa: E402

from lenscope.attribution import Attributor, ReferenceTransformer  # noqa: E402

SMALL = Shape(layers=2, d_model=64, heads=4, seq=16, batch=1, vocab=256)  # bench/first_answer.py's small model
FEATURES = 500  # transcoder width: a shape of its own, so no other test's programs are picked up


def prompt(n: int, seed: int) -> np.ndarray:
    tokens = np.random.default_rng(seed).integers(1, SMALL.vocab, n)
    tokens[0] = 0  # BOS (skip_positions=1)
    return tokens


def test_a_longer_prompt_with_more_features_after_a_short_one_compiles_nothing():
    model, params = reference_model(SMALL)
    tcs = transcoders(SMALL.layers, SMALL.d_model, FEATURES, bias=0.0, threshold=1.0)
    attributor = Attributor(ReferenceTransformer.of(model), tcs)
    short, long = prompt(5, 10), prompt(16, 107)
    first = attributor.graph(params, short, batch_size=128, progress=False)
    programs, compiles, recording = attributor.compilations, [], True

    def listen(name: str, *_, **__) -> None:  # a listener cannot be removed: it records while `recording`
        if recording and name.endswith("backend_compile_duration"):
            compiles.append(name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    later = attributor.graph(params, long, batch_size=128, progress=False)
    # more features a position than the first prompt had, beyond the 1.25x headroom of the capacity it used to set
    # (padded to that, this prompt compiled new edge programs)
    assert later.n_features / 15 > 1.25 * first.n_features / 4
    assert attributor.compilations == programs  # no program compiled or loaded
    assert compiles == []  # and nothing else compiled either (no eager op of a new shape)
    recording = False  # what follows compiles its own programs
    alone = Attributor(ReferenceTransformer.of(model), tcs, buckets=False).graph(params, long, batch_size=128,
                                                                                 progress=False)
    assert_same_graph(later, alone)
