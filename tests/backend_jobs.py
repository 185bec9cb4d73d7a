"""Jobs for the backend tests: trainers whose models carry non-parameter state (NNX) or non-array leaves (Equinox)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from lenscope.training import BaseTrainer, TrainerConfig
from lenscope.training.data import ArrayData


def xor_data(seed: int, batch_size: int) -> ArrayData:
    """Noisy 2-D XOR: 128 training and 64 validation examples."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(192, 2)).astype(np.float32)
    y = ((x[:, 0] > 0) ^ (x[:, 1] > 0)).astype(np.int32)
    return ArrayData({"train": {"inputs": x[:128], "labels": y[:128]},
                      "validation": {"inputs": x[128:], "labels": y[128:]}}, batch_size, seed)


def classification(logits: jax.Array, labels: jax.Array) -> tuple[jax.Array, dict]:
    """Cross-entropy with accuracy."""
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    return loss, {"accuracy": (logits.argmax(-1) == labels).mean()}


class Stateful(nnx.Module):
    """Linear -> BatchNorm -> relu -> Dropout -> Linear: batch statistics and an RNG stream besides the params."""

    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.hidden = nnx.Linear(2, 16, rngs=rngs)
        self.norm = nnx.BatchNorm(16, momentum=0.5, rngs=rngs)
        self.drop = nnx.Dropout(0.2, rngs=rngs)
        self.out = nnx.Linear(16, 2, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        """Logits [batch, 2]."""
        return self.out(self.drop(jax.nn.relu(self.norm(self.hidden(x)))))


class StatefulNnxTrainer(BaseTrainer[TrainerConfig, Stateful]):
    """XOR with an NNX model whose batch statistics and dropout RNG count change every step."""

    def build_model(self) -> Stateful:
        """Built with its Rngs: params from the seed, a separate dropout stream."""
        return Stateful(rngs=nnx.Rngs(params=self.args.seed, dropout=self.args.seed + 1))

    def build_data(self) -> ArrayData:
        """XOR."""
        return xor_data(self.args.seed, self.args.batch_size)

    def loss(self, params: Any, batch: Mapping[str, jax.Array], key: jax.Array) -> tuple[jax.Array, dict]:
        """Cross-entropy of the model bound to params (training mode during steps)."""
        return classification(self.module(params)(batch["inputs"]), batch["labels"])


class Leaves(eqx.Module):
    """An Equinox MLP with non-array leaves (a function, a float, a flag, a name) and an integer array."""

    hidden: eqx.nn.Linear
    out: eqx.nn.Linear
    activation: Callable[[jax.Array], jax.Array]
    scale: float
    centered: bool
    label: str
    buckets: jax.Array  # int32: model state, not a parameter

    def __init__(self, key: jax.Array) -> None:
        k1, k2 = jax.random.split(key)
        self.hidden = eqx.nn.Linear(2, 16, key=k1)
        self.out = eqx.nn.Linear(16, 2, key=k2)
        self.activation, self.scale, self.centered, self.label = jax.nn.tanh, 2.0, True, "xor"
        self.buckets = jnp.arange(4, dtype=jnp.int32)

    def __call__(self, x: jax.Array) -> jax.Array:
        """Logits [batch, 2] (eqx.nn.Linear is per example, so vmapped)."""
        x = x - x.mean(0) if self.centered else x
        h = self.activation(self.scale * jax.vmap(self.hidden)(x))
        return jax.vmap(self.out)(h) + 0.0 * self.buckets.sum()


class LeavesTrainer(BaseTrainer[TrainerConfig, Leaves]):
    """XOR with an Equinox model that has non-array leaves."""

    def build_model(self) -> Leaves:
        """Built from a key of the seed."""
        return Leaves(jax.random.key(self.args.seed))

    def build_data(self) -> ArrayData:
        """XOR."""
        return xor_data(self.args.seed, self.args.batch_size)

    def loss(self, params: Any, batch: Mapping[str, jax.Array], key: jax.Array) -> tuple[jax.Array, dict]:
        """Cross-entropy of the rebuilt model."""
        return classification(self.module(params)(batch["inputs"]), batch["labels"])
