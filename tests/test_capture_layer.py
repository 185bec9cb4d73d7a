"""The capture layer on its own: no upward imports, the Capturer's once-only work, and the backend seam."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import xla_compilations

from lenscope.capture import (
    CaptureBackend,
    Capturer,
    LinenBackend,
    ModuleCall,
    abstract,
    backend_for,
    debug,
    discover,
    make_capture_fn,
)
from lenscope.errors import UsageError


class Block(nn.Module):
    @nn.compact
    def __call__(self, x, scale=1.0):
        return x + nn.Dense(x.shape[-1], name="mlp")(nn.relu(x)) * scale


class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        for i in range(2):
            x = Block(name=f"blocks_{i}")(x)
        return nn.Dense(3, name="head")(x)


X = jnp.linspace(-1.0, 1.0, 2 * 4 * 8).reshape(2, 4, 8)


@pytest.fixture(scope="module")
def net() -> tuple[nn.Module, Any]:
    model = Net()
    return model, model.init(jax.random.key(0), X)["params"]


def test_capture_imports_nothing_from_training_analysis_or_store():
    code = "import sys, lenscope.capture; print(' '.join(m for m in sys.modules if m.startswith('lenscope')))"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env=env).stdout.split()
    assert "lenscope.capture.capturer" in loaded
    layers = {name.split(".")[1] for name in loaded if name.count(".") >= 1}
    below = {"errors", "version", "lazy", "files", "text", "job_registry", "model_libraries"}  # bottom
    assert layers <= {"capture", *below}, sorted(loaded)


def test_capturer_discovers_once_and_compiles_once_per_signature(net):
    model, params = net
    traces: list[int] = []
    offered: list[list[str]] = []

    def trace(params: Any, x: jax.Array) -> jax.Array:
        traces.append(1)
        return model.apply({"params": params}, x)

    def choose(found: list[str]) -> str:
        offered.append(found)
        return "blocks_1"

    def analyze(layer: Any, inputs: Any) -> jax.Array:
        return inputs.x.mean(axis=-1)

    capturer = Capturer(trace, Block, choose, analyze, LinenBackend())
    args = (params, X)
    with xla_compilations() as compiled:
        assert capturer.selection(args) == (["blocks_1"], False)
        ahead = capturer.executable(abstract(args))  # compiled from shapes, as a tandem warm-up does
        assert capturer.executable(args) is ahead
        first = ahead(*args)
        assert capturer.selection(args) == (["blocks_1"], False)
    assert offered == [["blocks_0", "blocks_1"]]  # one discovery, one choice
    assert len(traces) == 2  # the discovery's eval_shape and the one lowering
    assert capturer.compilations == 1
    assert [name for name, _ in compiled if name.startswith("capture")] == ["capture_analyze"]
    assert first.shape == (2, 4)

    longer = (params, jnp.concatenate([X, X], axis=1))
    with xla_compilations() as compiled:
        capturer.executable(longer)(*longer)
        capturer.executable(longer)(*longer)
    assert capturer.compilations == 2 and len(traces) == 3 and len(offered) == 1  # no second discovery
    assert [name for name, _ in compiled if name.startswith("capture")] == ["capture_analyze"]

    capturer.executable(args, {"xla_backend_optimization_level": 0})  # other XLA options: another executable
    assert capturer.compilations == 3

    capturer.reset()
    assert capturer.compilations == 0
    assert capturer.selection(args) == (["blocks_1"], False) and len(offered) == 2


def test_backend_for_chooses_linen_and_refuses_anything_else_naming_what_is_supported(net):
    model, _ = net
    assert isinstance(backend_for(model), LinenBackend)

    class Plain:
        """Not a module of any supported library."""

    with pytest.raises(UsageError, match=r"Plain model.*flax\.linen modules"):
        backend_for(Plain())
    with pytest.raises(UsageError, match=r"flax\.linen"):
        backend_for(lambda x: x)


class Recording:
    """A CaptureBackend written only against the Protocol: linen underneath, every reported call recorded."""

    name = "recording"

    def __init__(self) -> None:
        self.inner: CaptureBackend = LinenBackend()
        self.calls: list[tuple[str, str | None]] = []
        self.detached = 0

    def accepts(self, model: Any) -> bool:
        return self.inner.accepts(model)

    def check_target(self, target: Any) -> tuple[type, ...]:
        return self.inner.check_target(target)

    @contextmanager
    def intercept(self, on_call: Callable[[ModuleCall, Callable[[], Any]], Any]) -> Iterator[None]:
        def record(call: ModuleCall, proceed: Callable[[], Any]) -> Any:
            self.calls.append((call.method, call.path))
            return on_call(call, proceed)

        with self.inner.intercept(record):
            yield

    def detach(self, module: Any) -> Any:
        self.detached += 1
        return self.inner.detach(module)

    def variables(self, module: Any) -> Any:
        return self.inner.variables(module)


def test_discovery_capture_and_debugger_go_through_the_backend_seam(net):
    model, params = net
    forward = lambda p, x: model.apply({"params": p}, x)  # noqa: E731
    backend = Recording()

    assert discover(forward, (params, X), Block, backend=backend) == ["blocks_0", "blocks_1"]
    assert ("__call__", "blocks_0/mlp") in backend.calls

    backend.calls.clear()
    capture = jax.jit(make_capture_fn(forward, ["blocks_0"], False, lambda layer, inputs: layer(**inputs),
                                      backend=backend))
    np.testing.assert_allclose(capture(params, X), Block().apply({"params": params["blocks_0"]}, X), rtol=1e-5)
    assert backend.calls[0] == ("__call__", "") and ("__call__", "blocks_1") in backend.calls

    with debug(forward, (params, X), "blocks_1/mlp", backend=backend) as (layer, inputs):
        assert backend.detached == 1 and list(inputs) == ["inputs"]
        assert layer(**inputs).shape == (2, 4, 8)
