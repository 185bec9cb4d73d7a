"""Discovery, selection and capture-in-one-jit (A4, A5, A6) on real linen models and real JAX."""

from __future__ import annotations

import gc
import weakref

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lenscope.capture import (
    CaptureError,
    DebugInputs,
    discover,
    make_capture_fn,
    validate_result,
    validate_selection,
)
from lenscope.capture.jax_private import compiled_count
from lenscope.errors import UsageError

D = 8


class Attn(nn.Module):
    """Single-head attention built in setup() so helper methods like pattern() work on the bound module."""

    def setup(self):
        self.q, self.k, self.v, self.o = (nn.Dense(D, name=n) for n in "qkvo")

    def pattern(self, x, mask=None, scale=None):
        s = self.q(x) @ self.k(x).swapaxes(-1, -2) * (scale or D**-0.5)
        return jax.nn.softmax(jnp.where(mask, s, -1e9) if mask is not None else s)

    def __call__(self, x, mask=None, *, scale=None):
        return self.o(self.pattern(x, mask, scale) @ self.v(x))


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(D, name="out")(nn.gelu(nn.Dense(2 * D, name="up")(x)))


class Block(nn.Module):
    @nn.compact
    def __call__(self, x, mask):
        x = x + Attn(name="attn")(nn.LayerNorm(name="ln")(x), mask)
        return x + MLP(name="mlp")(x)


class TinyLM(nn.Module):
    @nn.compact
    def __call__(self, tokens, use_head=True):
        x = nn.Embed(11, D, name="embed")(tokens)
        mask = jnp.tril(jnp.ones((tokens.shape[-1],) * 2, bool))
        for i in range(2):
            x = Block(name=f"blocks_{i}")(x, mask)
        return nn.Dense(11, name="head")(x) if use_head else x


ATTN_ORDER = ["blocks_0/attn", "blocks_1/attn"]
TOKENS = jnp.arange(10).reshape(2, 5) % 11


@pytest.fixture(scope="module")
def lm():
    model = TinyLM()
    params = model.init(jax.random.key(0), TOKENS)["params"]
    return model, params


def forward(model):
    return lambda params, tokens: model.apply({"params": params}, tokens)


def test_discover_lists_calls_in_order_with_root_empty(lm):
    model, params = lm
    paths = discover(forward(model), (params, TOKENS))
    assert paths[:3] == ["", "embed", "blocks_0"]
    assert paths.index("blocks_0/ln") < paths.index("blocks_0/attn") < paths.index("blocks_0/attn/q")
    assert paths.index("blocks_0/mlp/out") < paths.index("blocks_1") < paths.index("head")
    assert len(paths) == len(set(paths))
    assert discover(forward(model), (params, TOKENS), Attn) == ATTN_ORDER
    assert discover(forward(model), (params, TOKENS), (MLP, Attn))[:2] == ["blocks_0/attn", "blocks_0/mlp"]


def test_discover_rejects_a_target_that_is_not_a_module(lm):
    model, params = lm
    with pytest.raises(UsageError, match="TARGET"):
        discover(forward(model), (params, TOKENS), int)


def test_selection_string_list_and_one_item_list():
    assert validate_selection("blocks_0/attn", ATTN_ORDER) == (["blocks_0/attn"], False)
    assert validate_selection(["blocks_1/attn"], ATTN_ORDER) == (["blocks_1/attn"], True)
    assert validate_selection(("blocks_1/attn", "blocks_0/attn"), ATTN_ORDER) == (ATTN_ORDER[::-1], True)
    assert validate_selection("", ["", "head"]) == ([""], False)


@pytest.mark.parametrize("bad", [[], (), None, 3, [1], ["blocks_0/attn", None], "blocks_0/atn", ["nope"]])
def test_bad_selection_lists_discovered_paths(bad):
    with pytest.raises(CaptureError) as err:
        validate_selection(bad, ATTN_ORDER)
    assert isinstance(err.value, UsageError)
    assert "'blocks_0/attn', 'blocks_1/attn'" in str(err.value)


def test_selection_typo_suggests_nearest():
    with pytest.raises(CaptureError, match=r"did you mean blocks_0/attn"):
        validate_selection("blocks_0/atn", ATTN_ORDER)


def test_string_selection_gets_bound_layer_and_inputs_that_reproduce_the_call(lm):
    model, params = lm
    seen = {}

    def analyze(layer, inputs):
        seen["types"] = (type(layer), type(inputs))
        seen["names"] = list(inputs)
        again = layer(**inputs)  # re-running the bound module inside analyze must work
        return {"again": again, "pattern": layer.pattern(inputs.x, inputs.mask), "scale": inputs.scale}

    outputs = {}

    def record(next_fun, args, kwargs, context):
        out = next_fun(*args, **kwargs)
        if context.method_name == "__call__" and context.module.path == ("blocks_1", "attn"):
            outputs.setdefault("first", out)
        return out

    with nn.intercept_methods(record):
        forward(model)(params, TOKENS)
    f = jax.jit(make_capture_fn(forward(model), ["blocks_1/attn"], False, analyze))
    result = f(params, TOKENS)
    assert seen["types"] == (Attn, DebugInputs)
    assert seen["names"] == ["x", "mask", "scale"]
    assert result["scale"] is None
    np.testing.assert_allclose(result["again"], outputs["first"], rtol=1e-5, atol=1e-6)
    assert result["pattern"].shape == (2, 5, 5)
    np.testing.assert_allclose(result["pattern"].sum(-1), 1.0, rtol=1e-5)
    assert float(result["pattern"][0, 0, 1]) < 1e-6  # causal mask was captured and applied


def test_list_selection_gives_parallel_lists_in_selection_order(lm):
    model, params = lm
    order = []

    def analyze(layers, inputs):
        assert isinstance(layers, list) and isinstance(inputs, list)
        order.extend(type(layer).__name__ for layer in layers)
        return [layer(**i) for layer, i in zip(layers, inputs)]

    f = jax.jit(make_capture_fn(forward(model), ["blocks_1/mlp", "blocks_0/attn"], True, analyze))
    mlp_out, attn_out = f(params, TOKENS)
    assert order == ["MLP", "Attn"]
    assert mlp_out.shape == attn_out.shape == (2, 5, D)

    one = jax.jit(make_capture_fn(forward(model), ["head"], True, lambda ls, xs: len(ls) + 0 * xs[0].inputs.sum()))
    assert int(one(params, TOKENS)) == 1  # a one-item list stays a list


def test_root_selection_on_compact_root_can_be_rerun(lm):
    model, params = lm
    f = jax.jit(make_capture_fn(forward(model), [""], False, lambda m, i: m(**i), with_output=False))
    np.testing.assert_allclose(f(params, TOKENS), forward(model)(params, TOKENS), rtol=1e-5, atol=1e-5)


class Twice(nn.Module):
    """Applies one shared Dense twice: only its first call may be captured."""

    @nn.compact
    def __call__(self, x):
        shared = nn.Dense(3, name="shared")
        return shared(shared(x) * 2.0)


def test_first_invocation_is_captured_and_analyze_calls_are_not_recaptured():
    model = Twice()
    x = jnp.arange(6.0).reshape(2, 3)
    variables = model.init(jax.random.key(1), x)
    calls = []

    def analyze(layer, inputs):
        calls.append(1)
        y = layer(**inputs)
        return {"x": inputs.inputs, "y2": layer(y * 2.0)}

    f = make_capture_fn(lambda v, x: model.apply(v, x), ["shared"], False, analyze)
    out, full = jax.jit(make_capture_fn(lambda v, x: model.apply(v, x), ["shared"], False, analyze,
                                        with_output=True))(variables, x)
    np.testing.assert_allclose(out["x"], x)  # the first call's input, not the second's
    np.testing.assert_allclose(out["y2"], full, rtol=1e-5)
    assert calls == [1]
    assert set(f(variables, x)) == {"x", "y2"}  # eager use (no jit) works too
    assert calls == [1, 1]


def test_selected_path_never_called_is_an_error(lm):
    model, params = lm
    skip_head = lambda p, t: model.apply({"params": p}, t, use_head=False)  # noqa: E731
    f = jax.jit(make_capture_fn(skip_head, ["blocks_0/attn", "head"], True, lambda ls, xs: 0))
    with pytest.raises(CaptureError, match=r"'head' never called.*'blocks_1/mlp'"):
        f(params, TOKENS)


def test_jit_compiles_once_for_same_shapes(lm):
    model, params = lm
    traces = []

    def traced(p, t):
        traces.append(1)
        return model.apply({"params": p}, t)

    f = jax.jit(make_capture_fn(traced, ["blocks_0/attn"], False, lambda layer, i: layer.pattern(i.x, i.mask)))
    a = f(params, TOKENS)
    b = f(params, (TOKENS + 1) % 11)
    assert len(traces) == 1 and compiled_count(f) == 1
    assert not np.allclose(a, b)
    f(params, jnp.zeros((3, 5), jnp.int32))
    assert len(traces) == 2  # a new shape is a new trace, as expected


def test_no_captured_value_outlives_the_call(lm):
    model, params = lm
    refs = []

    def analyze(layer, inputs):
        refs.append(weakref.ref(inputs))
        refs.append(weakref.ref(layer))
        return inputs.x.sum()

    make_capture_fn(forward(model), ["blocks_0/mlp"], False, analyze)(params, TOKENS)
    gc.collect()
    assert refs and all(r() is None for r in refs)


class Encoder(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(4, name="proj")(x)


def test_selection_spanning_two_applies(lm):
    """The root of the first apply is selected with a module of the second: its scope is gone by then."""
    model, params = lm
    enc = Encoder()
    enc_vars = enc.init(jax.random.key(2), jnp.ones((2, 5, D)))

    def trace(p, t):
        h = model.apply({"params": p}, t, use_head=False)
        return h, enc.apply(enc_vars, h)

    def analyze(layers, inputs):
        return [layers[0](**inputs[0]), layers[1](**inputs[1])]

    f = jax.jit(make_capture_fn(trace, ["", "proj"], True, analyze, with_output=True))
    (root_again, proj_again), (hidden, out) = f(params, TOKENS)
    np.testing.assert_allclose(root_again, hidden, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(proj_again, out, rtol=1e-5, atol=1e-6)


def test_result_validation_names_the_leaf(lm):
    model, params = lm
    f = jax.jit(make_capture_fn(forward(model), ["head"], False, lambda layer, i: {"ok": i.inputs, "bad": "text"}))
    with pytest.raises(UsageError, match=r"\['bad'\].*str"):
        f(params, TOKENS)
    g = jax.jit(make_capture_fn(forward(model), ["head"], False, lambda layer, i: {"layer": layer}))
    with pytest.raises(UsageError, match=r"\['layer'\].*Dense"):
        g(params, TOKENS)


def test_validate_result_accepts_and_rejects():
    validate_result({"a": np.ones(2), "b": [1, 2.0, True, 1j, None], "c": np.float32(1), "d": jnp.zeros(3)})
    validate_result(None)
    for bad, where in [({"s": "x"}, r"\['s'\]"), ([object()], r"\[0\]"), ({"o": np.array(["a"])}, r"\['o'\]"),
                       ({"i": DebugInputs({"x": np.ones(1)})}, r"\['i'\].*DebugInputs")]:
        with pytest.raises(UsageError, match=where):
            validate_result(bad)


def test_make_capture_fn_rejects_bad_arguments(lm):
    model, _ = lm
    with pytest.raises(CaptureError):
        make_capture_fn(forward(model), [], True, lambda *a: 0)
    with pytest.raises(CaptureError):
        make_capture_fn(forward(model), ["a", "b"], False, lambda *a: 0)
    with pytest.raises(UsageError, match="callable"):
        make_capture_fn(forward(model), ["a"], False, None)


def test_discover_is_not_fooled_by_jax_trace_caches(lm):
    model, params = lm
    fn = forward(model)
    jax.eval_shape(fn, params, TOKENS)  # a cached trace of the same function must not hide the calls
    assert discover(fn, (params, TOKENS), Attn) == ATTN_ORDER
    assert discover(fn, (params, TOKENS), Attn) == ATTN_ORDER


def test_forward_hidden_behind_a_warm_inner_jit_is_a_clear_error(lm):
    model, params = lm
    inner = jax.jit(forward(model))
    inner(params, TOKENS)
    f = jax.jit(make_capture_fn(lambda p, t: inner(p, t), ["head"], False, lambda layer, i: i.inputs.sum()))
    with pytest.raises(CaptureError, match="own jax.jit"):
        f(params, TOKENS)
    with pytest.raises(CaptureError, match="own jax.jit"):
        validate_selection("head", discover(lambda p, t: inner(p, t), (params, TOKENS)))
