"""Model surgery: a trained grokking model gains a second output head through an overridden surgery()."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import numpy as np
import optax

from lenscope.examples.grokking import GrokTrainer
from lenscope.models import Transformer
from lenscope.store import Store
from lenscope.training.checkpoint import partial_restore, read_checkpoint
from lenscope.training.state import flat_paths


class TwoHeads(nn.Module):
    """The grokking transformer plus a parity head reading its logits."""

    body: Transformer

    @nn.compact
    def __call__(self, tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
        logits = self.body(tokens)
        return logits, nn.Dense(2, name="parity")(logits[:, -1, :])


class ParityTrainer(GrokTrainer):
    """Fine-tunes the sum head and trains a new head for the parity of the answer."""

    def build_model(self) -> TwoHeads:
        return TwoHeads(super().build_model())

    def loss(self, params: Any, batch: Any, key: jax.Array):
        logits, parity = self.model.apply({"params": params}, batch["inputs"])
        sum_loss = optax.softmax_cross_entropy_with_integer_labels(logits[:, -1], batch["labels"]).mean()
        parity_loss = optax.softmax_cross_entropy_with_integer_labels(parity, batch["labels"] % 2).mean()
        return sum_loss + parity_loss, {"accuracy": (logits[:, -1].argmax(-1) == batch["labels"]).mean()}

    def surgery(self, state, saved):
        """Re-root the old model's parameters (and Adam moments) under `body`; the new head stays initialized."""
        def reroot(tree):
            return {"body": tree} if isinstance(tree, dict) and "embed" in tree else tree

        moved = {
            **saved,
            "params": reroot(saved["params"]),
            "opt_state": [{k: reroot(v) for k, v in part.items()} if isinstance(part, dict) else part
                          for part in saved["opt_state"]],
        }
        restored, self.restored_missing = partial_restore(state, moved)
        return restored


def test_surgery_adds_an_output_head_to_a_trained_model(tiny, store_root, trained_copy):
    base = trained_copy.node  # a 20-step run in store_root
    trainer = ParityTrainer(tiny + ["training/steps=10"], base=base, store=store_root)
    trainer.setup(resume=False)
    assert trainer.restored_missing and all("parity" in path for path in trainer.restored_missing)
    saved = flat_paths(read_checkpoint(Store(store_root).checkpoint(base))["params"])
    now = flat_paths(jax.device_get(trainer.state.params))
    for path, value in saved.items():
        np.testing.assert_array_equal(now[f"body/{path}"], value, err_msg=path)
    batch = trainer.batch("validation", 0)
    old = GrokTrainer(tiny, base=base, store=store_root)
    old.setup(resume=True)
    logits_before = old.model.apply({"params": old.state.params}, batch["inputs"])
    logits_after, parity = trainer.model.apply({"params": trainer.state.params}, batch["inputs"])
    np.testing.assert_allclose(logits_after, logits_before, rtol=1e-6)
    assert parity.shape == (batch["inputs"].shape[0], 2)
    trainer.run()
    assert int(trainer.state.step) == 10
    trainer.finish()
    trainer.cleanup()
    old.cleanup()
