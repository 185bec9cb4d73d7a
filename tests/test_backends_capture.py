"""Flax NNX and Equinox models through the capture layer: paths, selection, capture in one jit, the Debugger.

The same reference Transformer in three libraries, holding the same weights (lenscope.models.convert):
the same analysis code must find the same paths (modulo `blocks_0` / `blocks/0`) and give the same
numbers.
"""

from __future__ import annotations

import threading
from typing import Any

import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import xla_compilations
from flax import nnx

from lenscope.capture import (
    CaptureError,
    Capturer,
    DebugInputs,
    backend_for,
    debug,
    discover,
    find,
    match_paths,
    validate_selection,
)
from lenscope.errors import UsageError
from lenscope.models import MLPClassifier, Transformer, attention_pattern, convert, equinox
from lenscope.models import nnx as nnx_models
from lenscope.models import transformer as linen_models
from lenscope.training.kinds import model_kind

SIZES = dict(vocab_size=24, seq_len=3, d_model=16, n_heads=2, d_head=8, d_mlp=32, n_layers=2, n_out=23, use_ln=True)
TOKENS = jnp.array([[1, 2, 23], [4, 5, 23], [7, 8, 23]])
LIBRARIES = ("linen", "nnx", "equinox")


called = eqx.filter_jit(lambda model, x: model(x))  # an NNX or Equinox model applied in one compiled call


def linen_name(path: str) -> str:
    """An NNX/Equinox path in linen's spelling (`blocks/0` -> `blocks_0`)."""
    return path.replace("blocks/", "blocks_")


@pytest.fixture(scope="module")
def models() -> dict[str, tuple[Any, Any]]:
    """library -> (forward(weights, tokens), weights): the same weights in each library."""
    linen = Transformer(**SIZES)
    params = jax.jit(linen.init)(jax.random.key(0), TOKENS)["params"]
    built_nnx = convert.from_linen(params, nnx_models.Transformer(**SIZES, rngs=nnx.Rngs(1)))
    graphdef, nnx_state = nnx.split(built_nnx)
    built_eqx = convert.from_linen(params, equinox.Transformer(**SIZES, key=jax.random.key(2)))
    arrays, static = eqx.partition(built_eqx, eqx.is_array)
    return {
        "linen": (lambda w, t: linen.apply({"params": w}, t), params),
        "nnx": (lambda w, t: nnx.merge(graphdef, w)(t), nnx_state),
        "equinox": (lambda w, t: eqx.combine(w, static)(t), arrays),
    }


def backend(library: str) -> Any:
    return backend_for({"linen": Transformer(**SIZES), "nnx": nnx.Module(), "equinox": eqx.nn.Identity()}[library])


def test_reference_models_have_the_same_parameters_and_convert_both_ways(models):
    linen = Transformer(**SIZES)
    params = models["linen"][1]
    for model in (nnx_models.Transformer(**SIZES, rngs=nnx.Rngs(0)),
                  equinox.Transformer(**SIZES, key=jax.random.key(0))):
        assert sum(leaf.size for leaf in jax.tree.leaves(convert.to_linen(model))) == sum(
            leaf.size for leaf in jax.tree.leaves(params))
        loaded = convert.from_linen(params, model)
        back = convert.to_linen(loaded)
        assert jax.tree.structure(back) == jax.tree.structure(params)
        assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(params)))
        np.testing.assert_allclose(called(loaded, TOKENS), linen.apply({"params": params}, TOKENS), atol=1e-6)
    with pytest.raises(UsageError, match="do not fit the model"):
        convert.from_linen({"embed": params["embed"]}, nnx_models.Transformer(**SIZES, rngs=nnx.Rngs(0)))

    x = jnp.linspace(-1.0, 1.0, 12).reshape(3, 4)
    mlp = MLPClassifier(features=(8, 8), n_out=3)
    weights = jax.jit(mlp.init)(jax.random.key(0), x)["params"]
    for model in (nnx_models.MLPClassifier(4, (8, 8), 3, rngs=nnx.Rngs(0)),
                  equinox.MLPClassifier(4, (8, 8), 3, key=jax.random.key(0))):
        np.testing.assert_allclose(called(convert.from_linen(weights, model), x), mlp.apply({"params": weights}, x),
                                   atol=1e-6)


def test_paths_are_discovered_in_call_order_like_linen(models):
    found = {lib: discover(fn, (w, TOKENS), backend=backend(lib)) for lib, (fn, w) in models.items()}
    assert found["nnx"] == found["equinox"]
    assert [linen_name(p) for p in found["nnx"]] == found["linen"]
    assert found["nnx"][:4] == ["", "embed", "blocks/0", "blocks/0/ln1"]
    assert "blocks/1/attn/query" in found["nnx"] and found["nnx"][-2:] == ["ln_final", "unembed"]
    targeted = discover(models["nnx"][0], (models["nnx"][1], TOKENS),
                        (nnx_models.Attention, equinox.Attention), backend=backend("nnx"))
    assert targeted == ["blocks/0/attn", "blocks/1/attn"]


def residual_and_patterns(layers: list[Any], inputs: list[DebugInputs]) -> dict[str, Any]:
    """One analysis for every library: per-block residual norms and each attention layer's pattern."""
    out: dict[str, Any] = {}
    for layer, x in zip(layers, inputs):
        if "return_pattern" in x:
            out["pattern"] = out.get("pattern", ()) + (x.call(layer, return_pattern=True)[1],)
        else:
            out["norm"] = out.get("norm", ()) + (jnp.linalg.norm(x.call(layer), axis=-1).mean(),)
    return out


@pytest.mark.parametrize("library", ["nnx", "equinox"])
def test_same_analysis_same_numbers_in_one_compilation(models, library):
    results = {}
    for lib in ("linen", library):
        fn, weights = models[lib]
        globs = ["blocks_*/attn", "blocks_?"] if lib == "linen" else ["blocks/*/attn", "blocks/?"]
        capturer = Capturer(fn, None, lambda found, g=globs: match_paths(g, found), residual_and_patterns,
                            backend(lib))
        paths, as_list = capturer.selection((weights, TOKENS))
        assert as_list and [linen_name(p) for p in paths] == ["blocks_0", "blocks_0/attn", "blocks_1",
                                                              "blocks_1/attn"]
        with xla_compilations() as compiled:
            first = capturer.executable((weights, TOKENS))(weights, TOKENS)
            again = capturer.executable((weights, TOKENS))(weights, TOKENS)
        assert capturer.compilations == 1 and len([c for c in compiled if c[0].startswith("capture")]) == 1
        assert jax.tree.all(jax.tree.map(np.array_equal, first, again))
        results[lib] = first
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), results["linen"],
                 results[library])


@pytest.mark.parametrize("library", ["nnx", "equinox"])
def test_selection_errors_name_the_discovered_paths(models, library):
    fn, weights = models[library]
    found = discover(fn, (weights, TOKENS), backend=backend(library))
    with pytest.raises(CaptureError, match=r"unknown path 'blocks_0/attn' \(did you mean .*blocks/0/attn"):
        validate_selection("blocks_0/attn", found)
    capturer = Capturer(fn, None, lambda found: ["blocks/1/mlp", "nope"], lambda ls, xs: 0.0, backend(library))
    with pytest.raises(CaptureError, match=r"item 1 returned unknown path 'nope'.*'blocks/0/attn'"):
        capturer.selection((weights, TOKENS))


@pytest.mark.parametrize("library", ["nnx", "equinox"])
def test_debugger_finds_and_stops_at_a_path_eagerly(models, library):
    fn, weights = models[library]
    assert find(fn, (weights, TOKENS), (nnx_models.MLP, equinox.MLP), backend=backend(library)) == [
        "blocks/0/mlp", "blocks/1/mlp"]
    linen_fn, params = models["linen"]
    with debug(linen_fn, (params, TOKENS), "blocks_1/mlp") as (reference, expected):
        want = expected.call(reference)
    with debug(fn, (weights, TOKENS), "blocks/1/mlp", backend=backend(library)) as (layer, inputs):
        assert not isinstance(inputs.x, jax.core.Tracer)
        np.testing.assert_allclose(inputs.call(layer), want, atol=1e-5)
        np.testing.assert_allclose(layer(**inputs), want, atol=1e-5)
    with pytest.raises(CaptureError, match=r"never called 'blocks/9/mlp'.*paths it called"), debug(
            fn, (weights, TOKENS), "blocks/9/mlp", backend=backend(library)):
        pass


def test_target_across_libraries():
    nnx_backend, eqx_backend = backend("nnx"), backend("equinox")
    both = (nnx_models.Attention, equinox.Attention)
    assert nnx_backend.check_target(both) == (nnx_models.Attention,)
    assert eqx_backend.check_target(both) == (equinox.Attention,)
    assert eqx_backend.check_target(nn.Module) == (eqx.Module,)  # a library's base class: every module
    with pytest.raises(UsageError, match=r"TARGET \(lenscope.models.transformer.Attention\) names no equinox"):
        eqx_backend.check_target(linen_models.Attention)
    with pytest.raises(UsageError, match="TARGET must be a module class"):
        nnx_backend.check_target(int)


def test_interception_is_scoped_to_the_tracing_thread(models):
    fn, weights = models["nnx"]
    original = nnx_models.MLP.__dict__["__call__"]
    seen_elsewhere: list[str] = []
    calls: list[str] = []

    def other_thread() -> None:
        nnx_models.MLP(4, 8, rngs=nnx.Rngs(0))(jnp.ones((1, 4)))
        seen_elsewhere.append("ran")

    def record(call: Any, proceed: Any) -> Any:
        if call.path == "blocks/0/mlp" and not seen_elsewhere:
            worker = threading.Thread(target=other_thread)
            worker.start()
            worker.join()
        calls.append(call.path)
        return proceed()

    with backend("nnx").intercept(record):
        assert nnx_models.MLP.__dict__["__call__"] is not original
        fn(weights, TOKENS)
    assert nnx_models.MLP.__dict__["__call__"] is original  # put back when the last interceptor leaves
    assert seen_elsewhere == ["ran"] and calls.count("blocks/0/mlp") == 1 and None not in calls


def test_unsupported_models_and_nnx_without_rngs_are_clear_errors():
    with pytest.raises(UsageError, match=r"build_model\(\) must return a flax.linen.Module, a flax.nnx.Module "
                                         r"\(built with its nnx.Rngs\) or an equinox.Module instance, got a builtins"):
        model_kind(lambda x: x)
    with pytest.raises(UsageError, match=r"got the class .*nnx.transformer.Transformer: build it"):
        model_kind(nnx_models.Transformer)
    with pytest.raises(UsageError, match=r"needs its nnx.Rngs.*rngs=nnx.Rngs\(seed\)"):
        nnx_models.Transformer(**SIZES)
    with pytest.raises(UsageError, match=r"Dropout at 'drop' has no nnx.Rngs"):
        model_kind(_Dropping())


class _Dropping(nnx.Module):
    def __init__(self) -> None:
        self.drop = nnx.Dropout(0.5)


def test_captured_tracers_do_not_leak_and_classes_are_restored(models):
    fn, weights = models["equinox"]
    capturer = Capturer(fn, equinox.Attention, lambda found: found[0], lambda layer, x: attention_pattern(
        layer.query(x.x), layer.key(x.x), x.mask).mean(), backend("equinox"))
    value = capturer.executable((weights, TOKENS))(weights, TOKENS)
    assert np.isfinite(value)
    assert not any(hasattr(vars(cls)["__call__"], "__wrapped__")
                   for cls in (equinox.Attention, equinox.Dense, equinox.Transformer))
