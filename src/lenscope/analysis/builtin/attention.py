"""Attention patterns and their entropy, for any attention module that sows its weights."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from ...capture import CaptureError
from ...models.transformer import Attention
from .base import OpAnalysis, root_label

PATTERN_NAMES = ("pattern", "attention_weights")


def sown_pattern(layer: Any, inputs: Any) -> jax.Array:
    """Re-run an attention layer and return its weights [..., heads, q, k]: the second output with
    `return_pattern=True` when it has that parameter (the reference models in every library), else what a
    linen layer sows."""
    if "return_pattern" in inputs:
        return inputs.call(layer, return_pattern=True)[1]
    args, kwargs = inputs.args_kwargs()
    if "sow_weights" in inspect.signature(type(layer).__call__).parameters:
        kwargs["sow_weights"] = True  # flax MultiHeadDotProductAttention sows only when asked
    unbound, variables = layer.unbind()
    _, state = unbound.apply(variables, *args, mutable=["intermediates"], **kwargs)
    found = {name: value for name, value in state.get("intermediates", {}).items() if name in PATTERN_NAMES}
    if not found:
        raise CaptureError(f"{type(layer).__name__} sowed no attention weights named {' or '.join(PATTERN_NAMES)} "
                           "in 'intermediates'; select attention modules (names_filter) that do")
    value = next(iter(found.values()))
    return value[0] if isinstance(value, tuple) else value


def entropy(pattern: jax.Array) -> jax.Array:
    """Entropy in nats of each attention distribution (over the last axis)."""
    p = pattern.astype(jnp.float32)
    return -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), axis=-1)


class AttentionPatterns(OpAnalysis):
    """Per attention module: mean pattern [heads, q, k], mean entropy [heads, q] and a few examples' patterns."""

    NAME = "attention_patterns"
    TARGET = (Attention, "lenscope.models.nnx.Attention", "lenscope.models.equinox.Attention",
              "lenscope.models.pretrained.Attention",
              nn.MultiHeadDotProductAttention)  # by path: a linen job does not import flax.nnx or equinox
    PARAMS: ClassVar[Mapping[str, Any]] = {"examples": 4}

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, dict[str, jax.Array]]:
        """Patterns of each selected layer, averaged over the batch (leading axes)."""
        out = {}
        for path, layer, x in self.by_path(layers, inputs):
            pattern = sown_pattern(layer, x)
            batch = pattern.reshape(-1, *pattern.shape[-3:])
            out[root_label(path)] = {"mean": batch.mean(axis=0), "entropy": entropy(batch).mean(axis=0),
                                     "examples": batch[: int(self.params["examples"])]}
        return out

    def plot(self, results: dict[str, dict[str, np.ndarray]]) -> Any:
        """One heatmap per (layer, head) of the mean pattern, titled with its mean entropy."""
        panels, titles = [], []
        for path, item in results.items():
            for head in range(item["mean"].shape[0]):
                panels.append(item["mean"][head])
                titles.append(f"{path} h{head} (H={float(item['entropy'][head].mean()):.2f})")
        xlabel, xticks = self.position_axis(panels[0].shape[1], "key")
        ylabel, yticks = self.position_axis(panels[0].shape[0], "query")
        return self.heatmaps(panels, titles=titles, xlabel=xlabel, ylabel=ylabel, xticklabels=xticks,
                             yticklabels=yticks, title=f"Mean attention at {self.node}")
