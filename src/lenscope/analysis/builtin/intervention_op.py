"""The shared part of the intervention ops: clean and corrupted batches, answer metrics, path groups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from ...capture import match_paths
from ..patch_sweeps import answer_logits, logit_diff
from .base import OpAnalysis

BLOCKS = ("blocks_*", "**/blocks_*", "blocks/*", "**/blocks/*")  # each block's output: the residual stream after it
MODULES = ("**/attn", "**/mlp")  # the attention and MLP modules of the reference models, in every library
HEADS = ("**/attn/out",)  # the heads-by-d_head output projection of the reference attention in every library


def rolled(batch: Mapping[str, Any]) -> dict[str, Any]:
    """The default corruption: every array rolled by one example, so each row gets another row's inputs and label."""
    return {key: jnp.roll(value, 1, axis=0) for key, value in batch.items()}


class InterventionOp(OpAnalysis):
    """An op that runs the model again inside analyze(): `self.current_batch`, `corrupt(batch)`, the answer metric.

    The trainer may define `corrupt(batch) -> batch` (same shapes; its `labels` are the corrupted answers);
    without one, examples are paired with their neighbours (`rolled`).
    """

    DEFAULT_FILTER: ClassVar[str | tuple[str, ...] | None] = BLOCKS
    PARAMS: ClassVar[Mapping[str, Any]] = {"position": -1, "labels": "labels"}

    def clean_and_corrupted(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The analyzed batch and its corrupted counterpart (the trainer's `corrupt`, else `rolled`)."""
        batch = dict(self.current_batch)
        corrupt = getattr(self, "corrupt", None)
        return batch, dict(corrupt(batch) if callable(corrupt) else rolled(batch))

    def labels(self, batch: Mapping[str, Any]) -> jax.Array:
        """The answers of a batch (the `labels` parameter names the key)."""
        return batch[self.params["labels"]]

    def answer(self, output: Any) -> jax.Array:
        """Answer logits [batch, vocab] of a model output (at the `position` parameter)."""
        return answer_logits(output, int(self.params["position"]))

    def answer_forward(self, inputs: Any, patch: Any, on: str = "output") -> Any:
        """The patched forward's output at the answer position only (the rest is never computed where the
        model's block structure allows: capture.staged)."""
        return self.forward(inputs, patch, on=on, readout=int(self.params["position"]))  # type: ignore[attr-defined]

    def diff_metric(self, clean: Mapping[str, Any], corrupted: Mapping[str, Any]) -> Any:
        """output -> mean logit[clean answer] - logit[corrupted answer]."""
        correct, wrong = self.labels(clean), self.labels(corrupted)
        return lambda output: logit_diff(self.answer(output), correct, wrong)

    def loss_accuracy(self, output: Any, labels: jax.Array) -> dict[str, jax.Array]:
        """Cross-entropy and accuracy of the answer logits."""
        logits = self.answer(output)
        logp = jax.nn.log_softmax(logits.astype(jnp.float32))
        return {"loss": -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1)),
                "accuracy": jnp.mean(jnp.argmax(logits, axis=-1) == labels)}

    def head_paths(self) -> list[str]:
        """The selected paths that are heads-by-d_head projections (patched per head, on their inputs)."""
        return match_paths(HEADS, self.selected)

    def module_paths(self) -> list[str]:
        """The selected paths patched on their whole output."""
        heads = set(self.head_paths())
        return [path for path in self.selected if path not in heads]
