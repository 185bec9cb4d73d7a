"""Saved attribution programs (attribution/saved.py): an Attributor on a model lenscope binds itself saves its
compiled programs beside the compile cache, and a later Attributor (as a new process would) loads them without
tracing and draws the same graph, as it does for other transcoder values (the programs' arguments); a damaged
file is removed and the program compiled again; a model bound by the user's own function, or holding a module of
the user's, saves nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from _attribution_models import transcoders  # noqa: E402
from multiproc import cpu_env  # noqa: E402

from lenscope.attribution import Attributor, ReferenceTransformer  # noqa: E402
from lenscope.attribution.decoder import DecoderReplacement  # noqa: E402
from lenscope.attribution.saved import FOLDER  # noqa: E402
from lenscope.cli.compile_report import compile_report  # noqa: E402
from lenscope.compile_cache import use_user_compile_cache  # noqa: E402
from lenscope.models import Transformer  # noqa: E402
from lenscope.models.pretrained import DecoderConfig, random_decoder  # noqa: E402
from lenscope.models.pretrained.rope import inverse_frequencies  # noqa: E402
from lenscope.training.kinds.equinox import EquinoxKind  # noqa: E402

FEATURES = 40  # a transcoder width of its own: no other test's programs share these files
TOKENS = np.array([0, 5, 9, 3, 7, 2, 11, 4, 6])
ROPE = inverse_frequencies({"rope_theta": 1e4}, 8)


def _model(heads: int = 2) -> tuple[Transformer, dict]:
    model = Transformer(vocab_size=16, seq_len=16, d_model=16, n_heads=heads, d_head=16 // heads, d_mlp=32, n_layers=2,
                        use_ln=True)
    return model, model.init(jax.random.key(0), np.zeros((1, 16), np.int32))["params"]


def _graph(attributor: Attributor, params: object) -> tuple[object, set[str]]:
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

    # the transcoders' arrays are the programs' arguments: other values reuse the saved programs
    others = transcoders(2, 16, FEATURES, seed=4)
    other = Attributor(ReferenceTransformer.of(model), others)
    drawn, _ = _graph(other, params)
    assert other.loaded == other.compilations and sorted((cache / FOLDER).glob("*.xla")) == saved
    _same(drawn, _graph(Attributor(ReferenceTransformer.of(model, lambda p: model.bind({"params": p})), others),
                        params)[0])
    assert not np.array_equal(drawn.active_features, graph.active_features)


def test_a_damaged_file_is_removed_and_the_program_compiled_again() -> None:
    cache = use_user_compile_cache()
    # shapes of its own: every program compiled here first (the edge programs' shapes are the attention's and the
    # positions', whatever the transcoders' width)
    model, params = _model(heads=4)
    tcs = transcoders(2, 16, FEATURES + 4, seed=5)
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


def test_a_decoder_given_as_its_own_params_saves_its_programs_and_a_users_hook_in_it_none() -> None:
    """DecoderReplacement.of(decoder): the params are the Decoder, whose structure (each node's module-qualified
    type and static fields) is in the arguments' key. Its programs load in a later Attributor; other weights keep
    the trainer's definition key; a module of the user's anywhere in the tree saves nothing."""
    cache = use_user_compile_cache()
    config = DecoderConfig(family="llama", vocab_size=24, d_model=16, n_layers=2, n_heads=2, n_kv_heads=1, d_head=8,
                           d_mlp=32, rope_freqs=(ROPE, ROPE), rope_dim=8, attn_scale=8 ** -0.5)
    decoder = random_decoder(config, seed=0, std=0.3)
    tcs = transcoders(2, 16, FEATURES + 8, seed=6, threshold=0.1)
    first = Attributor(DecoderReplacement.of(decoder), tcs)
    graph = first.graph(decoder, TOKENS, batch_size=32, progress=False)
    second = Attributor(DecoderReplacement.of(decoder), tcs)
    again, traced = _graph(second, decoder)
    assert first.loaded == 0 and second.loaded == second.compilations == first.compilations >= 2
    assert not traced & {"_setup_fn", "_rows_fn"}
    _same(again, graph)

    key = EquinoxKind(decoder).definition_key()
    assert key is not None and EquinoxKind(random_decoder(config, seed=1)).definition_key() == key
    mine = eqx.tree_at(lambda m: m.blocks[0].hook_resid_post, decoder, _UsersHook())
    assert EquinoxKind(mine).definition_key() is None
    before = set((cache / FOLDER).glob("*.xla"))
    users = Attributor(DecoderReplacement.of(mine), tcs)
    _same(users.graph(mine, TOKENS, batch_size=32, progress=False), graph)
    assert users.loaded == 0 and set((cache / FOLDER).glob("*.xla")) == before


class _UsersHook(eqx.Module):
    """An identity hook of the user's: lenscope's source digest does not cover its code."""

    def __call__(self, x):
        return x


_ON_A_MESH = r'''
import sys
sys.path.insert(0, sys.argv[1])
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from _attribution_models import reference_model, transcoders
from _peer_common import Shape
from lenscope.attribution import Attributor, ReferenceTransformer
model, params = reference_model(Shape(layers=2, d_model=16, heads=2, seq=8, batch=1, vocab=20))
tcs = transcoders(2, 16, 32)
prompt = np.array([0, 5, 3, 7, 2, 9, 4])
alone = Attributor(ReferenceTransformer.of(model), tcs).graph(params, prompt, batch_size=32, progress=False)
mesh = Mesh(np.array(jax.devices()), ("data",))
sharded = jax.device_put(params, NamedSharding(mesh, PartitionSpec()))
elsewhere = [jax.device_put(t, jax.devices()[1]) for t in tcs]
graph = Attributor(ReferenceTransformer.of(model), elsewhere).graph(sharded, prompt, batch_size=32, progress=False)
np.testing.assert_array_equal(graph.active_features, alone.active_features)
np.testing.assert_allclose(graph.adjacency, alone.adjacency, atol=1e-6)
print("same graph", graph.adjacency.shape)
'''


def test_transcoders_on_one_device_serve_params_on_a_mesh() -> None:
    """The transcoders are the setup program's arguments, placed uncommitted: params replicated over 4 devices and
    transcoders committed to one of them still make one program, and the graph of one device."""
    done = subprocess.run([sys.executable, "-c", _ON_A_MESH, str(Path(__file__).resolve().parents[1] / "bench")],
                          env={**cpu_env(4), "LENSCOPE_COMPILE_CACHE": "off"}, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0 and "same graph" in done.stdout, done.stderr[-3000:]
