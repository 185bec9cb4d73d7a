"""Zero and mean ablation of each selected module and attention head: loss and accuracy per ablation."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..patch_sweeps import ablate_head, mean_ablate, zero_ablate
from .base import root_label
from .intervention_op import HEADS, MODULES, InterventionOp


class Ablation(InterventionOp):
    """Loss and accuracy with each selected module's output zeroed or replaced by its batch mean, and each
    head of an `attn/out` projection zeroed or mean-ablated on its input (every head vmapped)."""

    NAME = "ablation"
    DEFAULT_FILTER = (*MODULES, *HEADS)

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, Any]:
        """{"base": scores, "modules": {path: {"zero", "mean"}}, "heads": {path: {"zero", "mean"} per head}}."""
        batch = dict(self.current_batch)
        labels = self.labels(batch)
        modules, heads = self.module_paths(), self.head_paths()
        output, acts = self.activations(batch, modules)
        _, head_inputs = self.activations(batch, heads, on="inputs") if heads else (None, {})

        def scores(patch: Any, on: str = "output") -> dict[str, jax.Array]:
            return self.loss_accuracy(self.answer_forward(batch, patch, on), labels)

        out: dict[str, Any] = {"base": self.loss_accuracy(output, labels), "modules": {}, "heads": {}}
        for path in modules:
            out["modules"][root_label(path)] = {"zero": scores({path: zero_ablate}),
                                                "mean": scores({path: mean_ablate(acts[path])})}
        for path in heads:
            x = next(iter(head_inputs[path].values()))  # [..., heads, d_head]
            mean = jnp.mean(x.reshape(-1, *x.shape[-2:]), axis=0)  # [heads, d_head]
            count = x.shape[-2]
            per_head = {
                "zero": jax.vmap(lambda h, p=path: scores({p: ablate_head(h)}, "inputs"))(jnp.arange(count)),
                "mean": jax.vmap(lambda h, p=path, m=mean: scores({p: ablate_head(h, m[h])}, "inputs"))(
                    jnp.arange(count)),
            }
            out["heads"][root_label(path)] = per_head
        return out

    def plot(self, results: dict[str, Any]) -> Any:
        """Loss per ablation (bars), the unablated loss in the title."""
        labels, values = [], []
        for path, kinds in results["modules"].items():
            for kind, s in kinds.items():
                labels.append(f"{path} {kind}")
                values.append(float(s["loss"]))
        for path, kinds in results["heads"].items():
            for kind, s in kinds.items():
                for h, loss in enumerate(np.asarray(s["loss"])):
                    labels.append(f"{path} h{h} {kind}")
                    values.append(float(loss))
        return self.bar(labels, values, title=f"Ablation at {self.node} (base loss "
                                              f"{float(results['base']['loss']):.3f})", ylabel="loss")
