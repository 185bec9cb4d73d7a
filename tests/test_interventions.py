"""Interventions: patching, ablation, gradients and sweeps checked against independent computations."""

from __future__ import annotations

import importlib.util
import runpy
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from analysis_probes import config
from conftest import xla_compilations
from flax import nnx

import lenscope.ops
from lenscope.analysis import AnalysisBase
from lenscope.analysis.patch_sweeps import set_position, sweep
from lenscope.capture import CaptureError, discover
from lenscope.capture.choose import backend_for
from lenscope.capture.patch import gradients, patched, record
from lenscope.errors import UsageError
from lenscope.examples.grokking import GrokTrainer

X = jax.random.normal(jax.random.PRNGKey(1), (4, 3, 5))


# -- three small models, one per library: a -> relu -> b -> c, with a variant whose `b` returns zeros ------------
class LinenToy(nn.Module):
    zero_b: bool = False

    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Dense(6, name="a")(x))
        h = nn.Dense(6, name="b")(h)
        return nn.Dense(2, name="c")(jnp.zeros_like(h) if self.zero_b else h)


class NnxToy(nnx.Module):
    def __init__(self, zero_b: bool = False):
        rngs = nnx.Rngs(0)
        self.a, self.b, self.c, self.zero_b = nnx.Linear(5, 6, rngs=rngs), nnx.Linear(6, 6, rngs=rngs), \
            nnx.Linear(6, 2, rngs=rngs), zero_b

    def __call__(self, x):
        h = self.b(nnx.relu(self.a(x)))
        return self.c(jnp.zeros_like(h) if self.zero_b else h)


class EqxToy(eqx.Module):
    a: eqx.nn.Linear
    b: eqx.nn.Linear
    c: eqx.nn.Linear
    zero_b: bool = eqx.field(static=True, default=False)

    def __init__(self, zero_b: bool = False):
        ka, kb, kc = jax.random.split(jax.random.PRNGKey(0), 3)
        self.a, self.b, self.c = eqx.nn.Linear(5, 6, key=ka), eqx.nn.Linear(6, 6, key=kb), eqx.nn.Linear(6, 2, key=kc)
        self.zero_b = zero_b

    def __call__(self, x):
        h = jax.vmap(jax.vmap(self.b))(jax.nn.relu(jax.vmap(jax.vmap(self.a))(x)))
        return jax.vmap(jax.vmap(self.c))(jnp.zeros_like(h) if self.zero_b else h)


def toy(kind: str, zero_b: bool = False):
    """(forward x -> output, model) of one library's toy; the variant shares the parameters."""
    if kind == "linen":
        params = LinenToy().init(jax.random.PRNGKey(0), X)
        model = LinenToy(zero_b).bind(params)
        return (lambda x: model(x)), model
    model = NnxToy(zero_b) if kind == "nnx" else EqxToy(zero_b)
    return (lambda x: model(x)), model


@pytest.mark.parametrize("kind", ["linen", "nnx", "equinox"])
def test_zero_ablation_equals_a_model_whose_module_returns_zeros(kind):
    forward, model = toy(kind)
    zeroed, _ = toy(kind, zero_b=True)
    backend = backend_for(model)
    out = patched(forward, (X,), {"b": jnp.zeros_like}, backend=backend)
    np.testing.assert_allclose(out, zeroed(X), rtol=1e-6)
    assert not np.allclose(out, forward(X))
    zero_first = lambda x: x.replace(**{name: jnp.zeros_like(x[name]) for name in list(x)[:1]})  # noqa: E731
    inputs_zeroed = patched(forward, (X,), {"c": zero_first}, on="inputs", backend=backend)  # c's input zeroed
    np.testing.assert_allclose(inputs_zeroed, zeroed(X), rtol=1e-6)
    jitted = jax.jit(lambda x: patched(forward, (x,), {"b": jnp.zeros_like}, backend=backend))
    np.testing.assert_allclose(jitted(X), zeroed(X), rtol=1e-6)


def test_linear_toy_attribution_patching_equals_exact_patching():
    w1, w2 = jax.random.normal(jax.random.PRNGKey(2), (5, 6)), jax.random.normal(jax.random.PRNGKey(3), (6, 2))

    class Linear(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Dense(6, use_bias=False, name="first", kernel_init=lambda *_: w1)(x)
            return nn.Dense(2, use_bias=False, name="second", kernel_init=lambda *_: w2)(h)

    model = Linear().bind(Linear().init(jax.random.PRNGKey(0), X))
    forward, clean, corrupt = (lambda x: model(x)), X, X[::-1] * 2.0
    metric = lambda out: jnp.sum(out[..., 0] - 0.5 * out[..., 1])  # noqa: E731
    _, clean_acts = record(forward, (clean,), ["first"])
    base, corrupt_acts, grads = gradients(forward, (corrupt,), ["first"], metric)
    for position in range(3):
        exact = metric(patched(forward, (corrupt,), {"first": set_position(clean_acts["first"], position)})) - base
        estimate = jnp.sum((grads["first"] * (clean_acts["first"] - corrupt_acts["first"]))[:, position])
        np.testing.assert_allclose(estimate, exact, rtol=1e-4)


@pytest.fixture(scope="module")
def grok(tmp_path_factory):
    """A grokking trainer (linen, two layers) with state, its forward and its discovered paths."""
    root = tmp_path_factory.mktemp("grok")
    trainer = GrokTrainer(config(root, "model/n_layers=2"), store=root / "runs")
    trainer.setup()
    batch = trainer.batch("validation", 0)
    forward = lambda x: trainer.module(trainer.state.params)(x)  # noqa: E731
    paths = discover(trainer.trace, (trainer.state, batch, jax.random.PRNGKey(0)))
    yield trainer, batch, forward, paths
    trainer.cleanup()


def test_patching_every_path_with_clean_activations_reproduces_the_clean_output(grok):
    trainer, batch, forward, paths = grok
    backend = backend_for(trainer.model)
    clean, corrupt = batch["inputs"], trainer.corrupt(batch)["inputs"]
    inner = [p for p in paths if p]
    clean_out, acts = record(forward, (clean,), inner, backend=backend)
    bad_out = forward(corrupt)
    assert not np.allclose(bad_out, clean_out)
    restored = patched(forward, (corrupt,), {p: (lambda _, a=acts[p]: a) for p in inner}, backend=backend)
    np.testing.assert_allclose(restored, clean_out, rtol=1e-5, atol=1e-6)
    with pytest.raises(CaptureError, match="'blocks_9' never called.*did you mean blocks_1, blocks_0"):
        patched(forward, (clean,), {"blocks_9": jnp.zeros_like}, backend=backend)
    with pytest.raises(UsageError, match="on='sideways'"):
        patched(forward, (clean,), {}, on="sideways", backend=backend)


def test_a_vmapped_sweep_equals_the_loop_of_single_patches(grok):
    trainer, batch, forward, _ = grok
    backend = backend_for(trainer.model)
    clean, corrupt = batch["inputs"], trainer.corrupt(batch)["inputs"]
    paths = ["blocks_0", "blocks_0/attn", "blocks_1/mlp"]
    _, acts = record(forward, (clean,), paths, backend=backend)

    def score(patch):
        return jnp.mean(patched(forward, (corrupt,), patch, backend=backend)[:, -1] ** 2)

    grid = jax.jit(lambda: sweep(score, paths, lambda p, i: set_position(acts[p], i), 3))()
    loop = [[score({p: set_position(acts[p], i)}) for i in range(3)] for p in paths]
    np.testing.assert_allclose(grid, np.array(loop), rtol=1e-5)
    chunked = jax.jit(lambda: sweep(score, paths, lambda p, i: set_position(acts[p], i), 3, chunk=2))()
    np.testing.assert_allclose(chunked, np.array(loop), rtol=1e-5)  # two positions vmapped, then the third


class BatchAndForward(AnalysisBase, GrokTrainer):
    """Reads labels through self.current_batch, patches with self.forward, takes gradients, all inside analyze()."""

    NAME = "batch_and_forward"

    def select(self, paths):
        return "blocks_0/mlp"

    def analyze(self, layer, inputs):
        labels, x = self.current_batch["labels"], self.current_batch["inputs"]
        ablated = self.forward(x, {"blocks_0/mlp": jnp.zeros_like})
        metric = lambda out: -jnp.mean(jax.nn.log_softmax(out[:, -1])[jnp.arange(labels.shape[0]), labels])  # noqa
        loss, acts, grads = self.gradients(self.current_batch, ["blocks_0/mlp"], metric)
        return {"labels": labels, "ablated": ablated, "loss": loss, "grad": grads["blocks_0/mlp"],
                "traced": jnp.asarray(isinstance(labels, jax.core.Tracer))}


def test_self_batch_forward_and_gradients_inside_analyze_compile_once_and_match_eager(tmp_path):
    analysis = BatchAndForward(config(tmp_path), store=tmp_path / "runs")
    analysis.setup()
    with xla_compilations() as compiled:
        results = analysis.compute()
        analysis.compute()
    assert [name for name, _ in compiled if name.startswith("capture")] == ["capture_analyze"]
    assert bool(results["traced"]) and analysis.compilations == 1
    batch = analysis.batch("validation", 0)  # still the trainer's method
    np.testing.assert_array_equal(results["labels"], batch["labels"])
    np.testing.assert_array_equal(analysis.current_batch["labels"], batch["labels"])  # eager: the analysis batch
    assert not isinstance(analysis.batch, Mapping)  # the old Mapping reading of self.batch is gone (CHANGELOG)
    eager = analysis.forward(batch["inputs"], {"blocks_0/mlp": jnp.zeros_like})
    np.testing.assert_allclose(eager, results["ablated"], rtol=1e-5, atol=1e-6)
    reference = analysis.loss(analysis.state.params, batch, jax.random.PRNGKey(0))[0]
    np.testing.assert_allclose(results["loss"], reference, rtol=1e-5)
    assert results["grad"].shape == (batch["inputs"].shape[0], 3, 32) and np.abs(results["grad"]).max() > 0
    analysis.cleanup()


@pytest.mark.parametrize("backend", ["linen", "equinox"])
def test_builtin_ops_patching_attribution_ablation_steering(tmp_path, backend):
    trainer = GrokTrainer(config(tmp_path, f"model/backend={backend}"), store=tmp_path / "runs")
    patching = lenscope.ops.activation_patching(trainer).results
    block = trainer.block_path(0)
    assert patching["positions"].shape == (3, 3) and patching["heads"].shape == (1, 2)  # block, attn, mlp x a, b, =
    # the last block's output reaches the answer only at the answer position: patching it there restores all
    np.testing.assert_allclose(patching["positions"][0], [0.0, 0.0, 1.0], atol=1e-5)
    attribution = lenscope.ops.attribution_patching(trainer).results
    np.testing.assert_allclose(attribution["exact"], patching["positions"], atol=1e-5)
    assert float(attribution["correlation"]) > 0.99
    ablation = lenscope.ops.ablation(trainer).results
    assert set(ablation["modules"]) == {f"{block}/attn", f"{block}/mlp"}
    assert ablation["heads"][f"{block}/attn/out"]["zero"]["loss"].shape == (2,)
    steering = lenscope.ops.steering(trainer, scales=(0.0, 1.0)).results
    clean_diff = patching["clean"]
    np.testing.assert_allclose(steering[block]["logit_diff"][0], clean_diff, rtol=1e-4, atol=1e-6)


def test_peers_bench_parses_and_skips_missing_peers_cleanly(capsys, monkeypatch):
    """bench/peers.py (the TransformerLens/nnsight comparison) needs no peer to start; without torch it says so."""
    script = Path(__file__).resolve().parents[1] / "bench" / "peers.py"
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--threads" in done.stdout, done.stderr
    if importlib.util.find_spec("torch") is not None:
        return  # with the peers installed, skipping cannot be shown cheaply
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts bench/ on the path; undone after
    peers = runpy.run_path(str(script))  # defines the functions; main() runs only as a script
    assert peers["peer_side"](None, 1, None) is None
    assert "skipped TransformerLens and nnsight: No module named 'torch'" in capsys.readouterr().out
