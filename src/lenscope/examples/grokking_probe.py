"""Two-step composition on the grokking model: a table of residual activations, then a linear probe read from it.

    lenscope run grokking/train --base NODE --analysis grokking/probe_acts --analysis grokking/probe

Step 1 (`grokking/probe_acts`, table mode) stores, per example, the residual stream of one layer
(default: the last block's output at position 0, the token a; params position=-1 for the '='
position) with a, b, the label and the decoded input.
Step 2 (`grokking/probe`) reads that table through `input_store` (default: `probe_acts` on the
same node), fits a multinomial logistic-regression probe in JAX for properties of the input such as
`a%3` or `b%2`, and plots held-out probe accuracy against the majority-class rate. At position 0
the causal mask hides b, so `b%3` is the control that must stay near chance.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..analysis.builtin import OpAnalysis, layer_output
from ..analysis.running import load_input
from ..analysis.table_mode import TableConfig, default_columns
from ..errors import UsageError
from ..job_registry import job
from .grokking import GrokConfig, GrokTrainer

_PROPERTY = re.compile(r"^([A-Za-z_]\w*)(?:\s*%\s*([0-9]+))?$")


@dataclass
class GrokTableConfig(GrokConfig, TableConfig):
    """The grokking config plus the table-mode batch limit."""


@job("grokking/probe_acts")
class ProbeActivations(OpAnalysis, GrokTrainer):
    """Table: per example, the residual stream of one layer at one position, with a, b, label and text."""

    NAME = "probe_acts"
    CONFIG = GrokTableConfig
    PARAMS: ClassVar[Mapping[str, Any]] = {"position": 0}

    def select(self, paths: list[str]) -> list[str]:
        """The last block (its output is the residual stream after it); names_filter picks another layer."""
        return [self.block_path(self.args.n_layers - 1)]

    def output_schema(self) -> dict[str, Any]:
        """resid [d_model] plus the inputs and label of each example."""
        return super().output_schema() or {
            "resid": ("float32", (self.args.d_model,)), "a": "int32", "b": "int32", "labels": "int32", "text": "string",
        }

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, jax.Array]:
        """The selected layer's output at `position`, one row per example."""
        if len(layers) != 1:
            raise UsageError(f"probe_acts stores one layer; names_filter selected {self.selected}")
        return {"resid": layer_output(layers[0], inputs[0])[:, int(self.params["position"]), :]}

    def columns(self, results: dict[str, np.ndarray], batch: Any) -> dict[str, Any]:
        """Analysis results, a/b/labels from the batch, and the decoded input text."""
        columns = default_columns(self.output_schema(), results, batch)
        pairs = zip(np.asarray(columns["a"]).tolist(), np.asarray(columns["b"]).tolist())
        columns["text"] = [f"{a}+{b}=" for a, b in pairs]
        return columns


def property_values(table: dict[str, np.ndarray], spec: str) -> tuple[np.ndarray, int]:
    """Class labels and class count of a property: `COLUMN%K` (K classes) or `COLUMN` (its distinct values)."""
    match = _PROPERTY.match(spec.strip())
    if not match or match.group(1) not in table:
        raise UsageError(f"probe property {spec!r}: write COLUMN or COLUMN%K with COLUMN one of "
                         f"{', '.join(k for k in table if k != 'resid')}, e.g. 'a%3'")
    values = np.asarray(table[match.group(1)]).astype(np.int64)
    if match.group(2):
        k = int(match.group(2))
        if k < 2:
            raise UsageError(f"probe property {spec!r}: the modulus must be >= 2")
        return values % k, k
    _, codes = np.unique(values, return_inverse=True)
    return codes, int(codes.max() + 1)


@partial(jax.jit, static_argnames=("classes", "steps"))
def fit_probe(x: jax.Array, y: jax.Array, classes: int, steps: int, lr: float, weight_decay: float) -> tuple:
    """Multinomial logistic regression by full-batch Adam: returns (weights [d, classes], bias [classes])."""
    params = (jnp.zeros((x.shape[1], classes), jnp.float32), jnp.zeros((classes,), jnp.float32))
    optimizer = optax.adam(lr)

    def loss(p: tuple) -> jax.Array:
        logits = x @ p[0] + p[1]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean() + weight_decay * jnp.sum(p[0] ** 2)

    def step(carry: tuple, _: Any) -> tuple:
        p, opt = carry
        updates, opt = optimizer.update(jax.grad(loss)(p), opt, p)
        return (optax.apply_updates(p, updates), opt), None

    (params, _), _ = jax.lax.scan(step, (params, optimizer.init(params)), None, length=steps)
    return params


def probe_accuracy(features: np.ndarray, labels: np.ndarray, classes: int, *, test_fraction: float, steps: int,
                   lr: float, weight_decay: float, seed: int) -> dict[str, float]:
    """Train/held-out accuracy of a linear probe on standardized features, and the held-out majority-class rate."""
    order = np.random.default_rng(seed).permutation(len(labels))
    cut = round(len(labels) * (1 - test_fraction))
    train, test = order[:cut], order[cut:]
    if len(train) < 2 or len(test) < 1:
        raise UsageError(f"the probe needs more rows: {len(labels)} rows leave {len(train)} to fit "
                         f"and {len(test)} to test")
    mean, std = features[train].mean(0), features[train].std(0) + 1e-6
    x = (features - mean) / std
    w, b = fit_probe(jnp.asarray(x[train]), jnp.asarray(labels[train]), classes, steps, lr, weight_decay)
    predicted = np.asarray(jnp.argmax(jnp.asarray(x) @ w + b, axis=-1))
    majority = np.bincount(labels[test], minlength=classes).max() / len(test)
    return {"train": float((predicted[train] == labels[train]).mean()),
            "test": float((predicted[test] == labels[test]).mean()), "chance": float(majority), "classes": classes}


@job("grokking/probe")
class LinearProbe(OpAnalysis, GrokTrainer):
    """Linear probes for input properties, fitted in JAX on the `probe_acts` table (read through input_store)."""

    NAME = "probe"
    INPUT_STORE = "probe_acts"
    PARAMS: ClassVar[Mapping[str, Any]] = {"properties": ("a%2", "a%3", "b%3"), "steps": 500, "lr": 0.05,
                                           "weight_decay": 1e-3,
              "test_fraction": 0.5, "seed": 0}

    def compute(self, batch: Any = None, key: Any = None) -> dict[str, dict[str, float]]:
        """Fit one probe per property on the input table (no forward pass: the table holds the activations)."""
        dataset = load_input(self) if self.input_dataset is None else self.input_dataset
        numeric = dataset.with_format("numpy")
        table = {name: np.asarray(numeric[name]) for name in dataset.column_names if name != "text"}
        if "resid" not in table:
            raise UsageError(f"the probe's input table needs a 'resid' column; it has {dataset.column_names}")
        p = self.params
        properties = [p["properties"]] if isinstance(p["properties"], str) else list(p["properties"])
        out = {}
        for spec in properties:
            labels, classes = property_values(table, spec)
            out[spec] = probe_accuracy(table["resid"].astype(np.float32), labels, classes,
                                       test_fraction=float(p["test_fraction"]), steps=int(p["steps"]),
                                       lr=float(p["lr"]), weight_decay=float(p["weight_decay"]), seed=int(p["seed"]))
        return out

    def plot(self, results: dict[str, dict[str, float]]) -> Any:
        """Held-out probe accuracy per property, each labelled with its majority-class rate."""
        labels = [f"{spec}\n(chance {r['chance']:.2f})" for spec, r in results.items()]
        return self.bar(labels, [r["test"] for r in results.values()], title=f"Linear probe accuracy at {self.node}",
                        xlabel="property", ylabel="held-out accuracy")
