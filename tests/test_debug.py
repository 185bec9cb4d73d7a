"""DebugInputs binding and the eager Debugger (A5 inputs, A10) on a real linen model."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lenscope.capture import CaptureError, DebugInputs, debug, find
from lenscope.errors import UsageError

D = 6


class Attn(nn.Module):
    @nn.compact
    def __call__(self, x, mask=None, *, temperature=1.0):
        s = nn.Dense(D, name="q")(x) @ nn.Dense(D, name="k")(x).swapaxes(-1, -2) / temperature
        s = jnp.where(mask, s, -1e9) if mask is not None else s
        return jax.nn.softmax(s) @ nn.Dense(D, name="v")(x)


class Block(nn.Module):
    @nn.compact
    def __call__(self, x, train=False):
        x = x + Attn(name="attn")(x)
        x = nn.Dropout(0.5, deterministic=not train)(x)
        return x + nn.Dense(D, name="mlp")(nn.relu(x))


class Net(nn.Module):
    @nn.compact
    def __call__(self, x, train=False):
        for i in range(2):
            x = Block(name=f"blocks_{i}")(x, train)
        return nn.Dense(3, name="head")(x)


class VarArgs(nn.Module):
    def __call__(self, a, /, *rest, scale=1.0, **extra):
        return (a + sum(rest)) * scale + extra.get("shift", 0.0)


X = jnp.linspace(-1.0, 1.0, 2 * 4 * D).reshape(2, 4, D)


@pytest.fixture(scope="module")
def net():
    model = Net()
    params = model.init(jax.random.key(0), X)["params"]
    return model, params


def fwd(model):
    return lambda params, x: model.apply({"params": params}, x)


def test_bind_applies_defaults_and_supports_attribute_access():
    attn = Attn()
    inputs = DebugInputs.bind(attn.__call__, (X,), {})
    assert list(inputs) == ["x", "mask", "temperature"]
    assert inputs.mask is None and inputs["temperature"] == 1.0 and inputs.x is X
    assert dict(inputs) == {"x": X, "mask": None, "temperature": 1.0}
    assert "x: float32[2,4,6]" in repr(inputs) and "mask: None" in repr(inputs)
    with pytest.raises(AttributeError, match="did you mean mask"):
        _ = inputs.mak
    with pytest.raises(AttributeError, match="read-only"):
        inputs.x = 1


def test_call_and_replace_handle_positional_only_and_variadics():
    layer = VarArgs()
    inputs = DebugInputs.bind(layer.__call__, (1.0, 2.0, 3.0), {"scale": 2.0, "shift": 0.5})
    assert dict(inputs) == {"a": 1.0, "rest": (2.0, 3.0), "scale": 2.0, "extra": {"shift": 0.5}}
    assert inputs.call(layer) == 12.5
    assert inputs.call(layer, scale=1.0) == 6.5
    assert inputs.replace(rest=()).call(layer) == 2.5
    with pytest.raises(UsageError, match="did you mean scale"):
        inputs.replace(scal=3.0)


def test_debug_inputs_is_a_pytree_that_crosses_jit():
    inputs = DebugInputs.bind(Attn().__call__, (X,), {"temperature": 2.0})
    leaves, treedef = jax.tree_util.tree_flatten(inputs)
    assert len(leaves) == 2  # mask=None is an empty subtree
    back = jax.tree_util.tree_unflatten(treedef, leaves)
    assert isinstance(back, DebugInputs) and list(back) == list(inputs)
    doubled = jax.jit(lambda i: i.x * i.temperature)(inputs)
    np.testing.assert_allclose(doubled, X * 2.0)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(inputs)[0]]
    assert paths == ["['x']", "['temperature']"]


def test_find_lists_paths_like_discovery(net):
    model, params = net
    paths = find(fwd(model), (params, X))
    assert paths[:4] == ["", "blocks_0", "blocks_0/attn", "blocks_0/attn/q"]
    assert find(fwd(model), (params, X), Attn) == ["blocks_0/attn", "blocks_1/attn"]


def _first_output(model, params, path):
    outputs = {}

    def record(next_fun, args, kwargs, context):
        out = next_fun(*args, **kwargs)
        if context.method_name == "__call__" and "/".join(context.module.path) == path:
            outputs.setdefault(path, out)
        return out

    with nn.intercept_methods(record):
        model.apply({"params": params}, X)
    return outputs[path]


def test_debug_stops_at_first_call_and_layer_reproduces_it(net):
    model, params = net
    before = jax.tree_util.tree_map(np.array, params)
    calls = []

    def forward(p, x):
        calls.append("start")
        out = model.apply({"params": p}, x)
        calls.append("finished")  # never reached: the forward stops at blocks_1/attn
        return out

    with debug(forward, (params, X), "blocks_1/attn") as (layer, inputs):
        assert isinstance(layer, Attn) and isinstance(inputs, DebugInputs)
        assert list(inputs) == ["x", "mask", "temperature"]
        assert isinstance(inputs.x, jax.Array) and not isinstance(inputs.x, jax.core.Tracer)
        again = layer(**inputs)
        np.testing.assert_allclose(again, _first_output(model, params, "blocks_1/attn"), rtol=1e-5, atol=1e-6)
        sharper = inputs.call(layer, temperature=0.1)
        assert not np.allclose(sharper, again)
        np.testing.assert_allclose(layer.variables["params"]["q"]["kernel"], params["blocks_1"]["attn"]["q"]["kernel"])
    assert calls == ["start"]
    jax.tree_util.tree_map(np.testing.assert_array_equal, before, jax.tree_util.tree_map(np.array, params))
    np.testing.assert_allclose(fwd(model)(params, X), model.apply({"params": before}, X))


def test_debug_root_and_leaf_paths(net):
    model, params = net
    with debug(fwd(model), (params, X), "") as (root, inputs):
        np.testing.assert_allclose(root(**inputs), fwd(model)(params, X), rtol=1e-6)
    with debug(fwd(model), (params, X), "blocks_0/mlp") as (dense, inputs):
        assert isinstance(dense, nn.Dense) and inputs.inputs.shape == (2, 4, D)


def test_debug_with_dropout_rngs_gets_a_usable_layer(net):
    model, params = net

    def train_forward(p, x, key):
        return model.apply({"params": p}, x, train=True, rngs={"dropout": key})

    with debug(train_forward, (params, X, jax.random.key(3)), "blocks_0") as (block, inputs):
        assert inputs.train is True
        out = block(**inputs)  # needs a dropout rng: the re-bound layer carries one
        assert out.shape == X.shape and bool(jnp.all(jnp.isfinite(out)))


def test_debug_unknown_path_lists_paths(net):
    model, params = net
    unknown = r"never called 'blocks_0/atn' \(did you mean blocks_0/attn.*'blocks_1/mlp'"
    with pytest.raises(CaptureError, match=unknown), debug(fwd(model), (params, X), "blocks_0/atn"):
        pass
    with pytest.raises(CaptureError, match="must be a str"), debug(fwd(model), (params, X), 3):
        pass


def test_debug_refuses_a_vmapped_forward(net):
    model, params = net
    vmapped = jax.vmap(fwd(model), in_axes=(None, 0))
    with pytest.raises(CaptureError, match="traced"), debug(vmapped, (params, X), "blocks_0/attn"):
        pass
