"""Saved attribution programs (attribution/saved.py): an Attributor on a model lenscope binds itself saves its
compiled programs beside the compile cache, and a later Attributor (as a new process would) loads them without
tracing, drawing the same graph; other transcoder values are other programs; a damaged file is removed and the
program compiled again; a model bound by the user's own function saves nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from _attribution_models import transcoders  # noqa: E402

from lenscope.attribution import Attributor, ReferenceTransformer  # noqa: E402
from lenscope.attribution.saved import FOLDER  # noqa: E402
from lenscope.cli.compile_report import compile_report  # noqa: E402
from lenscope.compile_cache import use_user_compile_cache  # noqa: E402
from lenscope.models import Transformer  # noqa: E402

FEATURES = 40  # a transcoder width of its own: no other test's programs share these files
TOKENS = np.array([0, 5, 9, 3, 7, 2, 11, 4, 6])


def _model() -> tuple[Transformer, dict]:
    model = Transformer(vocab_size=16, seq_len=16, d_model=16, n_heads=2, d_head=8, d_mlp=32, n_layers=2,
                        use_ln=True)
    return model, model.init(jax.random.key(0), np.zeros((1, 16), np.int32))["params"]


def _graph(attributor: Attributor, params: dict) -> tuple[object, set[str]]:
    """The graph of TOKENS and the names of the programs traced to draw it."""
    with compile_report(lambda line: None) as report:
        graph = attributor.graph(params, TOKENS, batch_size=32, progress=False)
        traced = {name for name, phases in report.items() if "trace" in phases}
    return graph, traced


def _same(a, b) -> None:
    np.testing.assert_array_equal(a.active_features, b.active_features)
    np.testing.assert_array_equal(a.adjacency, b.adjacency)
    np.testing.assert_array_equal(a.logit_targets, b.logit_targets)


def test_a_later_attributor_loads_the_programs_without_tracing_and_draws_the_same_graph() -> None:
    cache = use_user_compile_cache()
    assert cache is not None  # conftest's session cache
    model, params = _model()
    tcs = transcoders(2, 16, FEATURES, seed=3)
    first = Attributor(ReferenceTransformer.of(model), tcs)
    graph, traced = _graph(first, params)
    assert first.loaded == 0 and first.compilations >= 2 and {"_setup_fn", "_rows_fn"} <= traced
    saved = sorted((cache / FOLDER).glob("*.xla"))
    assert len(saved) >= first.compilations

    second = Attributor(ReferenceTransformer.of(model), tcs)
    again, traced = _graph(second, params)
    assert second.loaded == second.compilations == first.compilations
    assert not traced & {"_setup_fn", "_rows_fn"}
    _same(again, graph)
    unbuffered = Attributor(ReferenceTransformer.of(model, lambda p: model.bind({"params": p})), tcs)
    assert unbuffered.model.program_key is None  # the user's own binding: JAX's cache only, nothing saved
    reference, _ = _graph(unbuffered, params)
    assert unbuffered.loaded == 0
    _same(graph, reference)

    other = Attributor(ReferenceTransformer.of(model), transcoders(2, 16, FEATURES, seed=4))
    other.graph(params, TOKENS, batch_size=32, progress=False)
    assert other.loaded == 0  # other transcoder values are constants of other programs
    assert len(sorted((cache / FOLDER).glob("*.xla"))) > len(saved)


def test_a_damaged_file_is_removed_and_the_program_compiled_again() -> None:
    cache = use_user_compile_cache()
    model, params = _model()
    tcs = transcoders(2, 16, FEATURES + 4, seed=5)  # shapes of its own: every program compiled here first
    before = set((cache / FOLDER).glob("*.xla")) if (cache / FOLDER).exists() else set()
    first = Attributor(ReferenceTransformer.of(model), tcs)
    graph, _ = _graph(first, params)
    mine = sorted(set((cache / FOLDER).glob("*.xla")) - before)
    assert len(mine) == first.compilations
    for path in mine:
        path.write_bytes(b"not a program")
    damaged = Attributor(ReferenceTransformer.of(model), tcs)
    again, traced = _graph(damaged, params)
    assert damaged.loaded == 0 and "_rows_fn" in traced
    _same(again, graph)
    # JAX's persistent cache served the programs again; such executables are not saved (they lack their code)
    assert not any(path.exists() for path in mine)
    later = Attributor(ReferenceTransformer.of(model), tcs)
    _same(_graph(later, params)[0], graph)
    assert later.loaded == 0
