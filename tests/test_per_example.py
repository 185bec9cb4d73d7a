"""Models written per example and vmapped in the loss (the idiomatic Equinox style) train, capture and patch:
with PER_EXAMPLE set, capture and patches see whole batches, also under the model's own vmaps."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import lenscope.ops
from lenscope import AnalysisBase, ArrayData, BaseTrainer, Store, UsageError, run_job
from lenscope.capture import EquinoxBackend
from lenscope.capture.patch import gradients
from lenscope.capture.patch import patched as capture_patched
from lenscope.capture.per_example import per_example


class Mlp(eqx.Module):
    """Per example: x [2] -> logits [2], with eqx.nn.Linear (which needs unbatched inputs)."""

    layers: list

    def __init__(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.layers = [eqx.nn.Linear(2, 16, key=k1), eqx.nn.Linear(16, 16, key=k2), eqx.nn.Linear(16, 2, key=k3)]

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = jax.nn.relu(layer(x))
        return self.layers[-1](x)


class Block(eqx.Module):
    """Per example: tokens' vectors [seq, d] -> [seq, d]; the attention vmaps its projections over positions."""

    attn: eqx.nn.MultiheadAttention
    mlp: eqx.nn.MLP

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.attn = eqx.nn.MultiheadAttention(2, 16, key=k1)
        self.mlp = eqx.nn.MLP(16, 16, 32, 1, key=k2)

    def __call__(self, x):
        x = x + self.attn(x, x, x)
        return x + jax.vmap(self.mlp)(x)


class Tiny(eqx.Module):
    embed: eqx.nn.Embedding
    blocks: list
    head: eqx.nn.Linear

    def __init__(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.embed = eqx.nn.Embedding(8, 16, key=k1)
        self.blocks = [Block(k2)]
        self.head = eqx.nn.Linear(16, 8, key=k3)

    def __call__(self, tokens):
        x = jax.vmap(self.embed)(tokens)
        for block in self.blocks:
            x = block(x)
        return jax.vmap(self.head)(x)


def xor(seed: int) -> ArrayData:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, 2)).astype(np.float32)
    y = ((x[:, 0] > 0) ^ (x[:, 1] > 0)).astype(np.int32)
    return ArrayData({"train": {"inputs": x[:192], "labels": y[:192]},
                      "validation": {"inputs": x[192:], "labels": y[192:]}}, 64, seed)


class PerExampleXor(BaseTrainer):
    PER_EXAMPLE = True

    def build_model(self):
        return Mlp(jax.random.key(self.args.seed))

    def build_data(self):
        return xor(self.args.seed)

    def answer(self, logits):
        return logits

    def loss(self, params, batch, key):
        logits = self.answer(jax.vmap(self.module(params))(batch["inputs"]))
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).mean(), {}


class HiddenNorm(AnalysisBase, PerExampleXor):
    NAME = "hidden_norm"

    def select(self, paths):
        return "layers/1"

    def analyze(self, layer, inputs):
        assert inputs["x"].shape == (64, 16)  # the whole batch, not one example
        return {"norm": jnp.linalg.norm(jax.vmap(layer)(inputs["x"]), axis=-1).mean()}

    def plot(self, results):
        return {"norm": float(results["norm"])}


CONFIG = ["training/steps=20", "optimization/lr=1e-2", "logging/validation_interval=0",
          "logging/checkpoint_interval=20"]


def test_per_example_mlp_trains_captures_and_patches(tmp_path) -> None:
    store = Store(tmp_path / "runs")
    config = CONFIG + [f"logging/results={tmp_path / 'results'}"]
    node = run_job(PerExampleXor(config, store=store))
    run_job(HiddenNorm, config, base=node, store=store)
    assert "hidden_norm" in store.get(node).artifacts
    trainer = PerExampleXor(config, base=node, store=store)
    trainer.setup(resume=True)
    ablation = lenscope.ops.ablation(trainer, names_filter="layers/*").results
    assert sorted(ablation["modules"]) == ["layers/0", "layers/1", "layers/2"]
    zeroed = ablation["modules"]["layers/1"]
    assert np.isfinite(jax.tree_util.tree_leaves(zeroed)).all()
    batch = trainer.batch("validation")
    model = trainer.module(trainer.state.params)
    clean = eqx.filter_jit(lambda m, x: jax.vmap(m)(x))(model, batch["inputs"])
    forward = lambda x: trainer.apply_model(model, (x,))  # noqa: E731
    patched = jax.jit(lambda x: capture_patched(forward, (x,), {"layers/2": lambda y: y.at[0].set(0.0)},
                                                backend=EquinoxBackend()))(batch["inputs"])  # y is [batch, 2]
    np.testing.assert_allclose(patched[1:], clean[1:], atol=1e-6)
    np.testing.assert_allclose(patched[0], 0.0, atol=1e-6)
    trainer.cleanup()


class DictOutputXor(PerExampleXor):
    """A forward that returns a dict of logits (as transformers-style models return an output object)."""

    def apply_model(self, model, inputs):
        return {"logits": super().apply_model(model, inputs)}


@pytest.mark.parametrize("op", ["ablation", "activation_patching", "steering"])
def test_a_model_output_that_is_not_an_array_is_a_clear_error(tmp_path, op) -> None:
    trainer = DictOutputXor(CONFIG + [f"logging/results={tmp_path / 'results'}"], store=Store(tmp_path / "runs"))
    with pytest.raises(UsageError, match=r"returned a builtins.dict; the ops score logits"):
        getattr(lenscope.ops, op)(trainer, names_filter="layers/*")
    trainer.cleanup()


def test_nested_vmaps_inside_the_model_are_seen_through() -> None:
    from lenscope.capture.patch import record
    model = eqx.filter_jit(Tiny)(jax.random.key(0))
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 8, (4, 5)))
    paths = ["blocks/0/attn/query_proj", "blocks/0/attn", "blocks/0"]
    forward = per_example(model)

    @jax.jit
    def run(t):
        return record(forward, (t,), paths, backend=EquinoxBackend())

    out, recorded = run(tokens)
    np.testing.assert_allclose(out, eqx.filter_jit(lambda m, t: jax.vmap(m)(t))(model, tokens), atol=1e-6)
    assert recorded["blocks/0/attn/query_proj"].shape == (4, 5, 16)  # batch x positions, though vmapped twice
    assert recorded["blocks/0/attn"].shape == (4, 5, 16)
    with pytest.raises(UsageError, match="per-example model"):
        gradients(forward, (tokens,), ["blocks/0"], lambda o: o.sum(), backend=EquinoxBackend())


def last_token(seed: int) -> ArrayData:
    """Token sequences [5] whose label, read at the last position, is the last token (Tiny has no positions)."""
    tokens = np.random.default_rng(seed).integers(0, 8, (1024, 5)).astype(np.int32)
    labels = tokens[:, -1]
    return ArrayData({"train": {"inputs": tokens[:960], "labels": labels[:960]},
                      "validation": {"inputs": tokens[960:], "labels": labels[960:]}}, 64, seed)


class PerExampleTransformer(PerExampleXor):
    """The per-example transformer on `last_token`, its answer read at the last position."""

    def build_model(self):
        return Tiny(jax.random.key(self.args.seed))

    def build_data(self):
        return last_token(self.args.seed)

    def answer(self, logits):
        return logits[:, -1]


class AttentionNorm(AnalysisBase, PerExampleTransformer):
    NAME = "attention_norm"

    def select(self, paths):
        return "blocks/0/attn"

    def analyze(self, attn, inputs):
        assert inputs["query"].shape == (64, 5, 16)  # the whole batch of sequences, though vmapped in the loss
        return {"norm": jnp.linalg.norm(inputs["query"], axis=-1).mean()}

    def plot(self, results):
        return {"norm": float(results["norm"])}


def test_per_example_transformer_trains_captures_and_patches(tmp_path) -> None:
    store = Store(tmp_path / "runs")
    config = ["training/steps=100", "optimization/lr=1e-2", "logging/validation_interval=0",
              "logging/checkpoint_interval=100", f"logging/results={tmp_path / 'results'}"]
    node = run_job(PerExampleTransformer(config, store=store))
    trainer = PerExampleTransformer(config, base=node, store=store)
    trainer.setup(resume=True)
    batch = trainer.batch("validation")
    model = trainer.module(trainer.state.params)
    clean = eqx.filter_jit(lambda m, x: jax.vmap(m)(x))(model, batch["inputs"])
    assert float((clean[:, -1].argmax(-1) == batch["labels"]).mean()) > 0.9  # it trained (chance: 1/8)
    run_job(AttentionNorm, config, base=node, store=store)
    assert "attention_norm" in store.get(node).artifacts
    ablation = lenscope.ops.ablation(trainer, names_filter="blocks/0/*").results
    assert {"blocks/0/attn", "blocks/0/mlp"} <= set(ablation["modules"])
    # zeroing the attention's output of example 0 changes only example 0's logits
    forward = lambda x: trainer.apply_model(model, (x,))  # noqa: E731
    patch = {"blocks/0/attn": lambda y: y.at[0].set(0.0)}  # y is [batch, seq, d]
    patched = jax.jit(lambda x: capture_patched(forward, (x,), patch, backend=EquinoxBackend()))(batch["inputs"])
    np.testing.assert_allclose(patched[1:], clean[1:], atol=1e-5)
    assert float(jnp.abs(patched[0] - clean[0]).max()) > 1e-3
    trainer.cleanup()
