"""SaeTrainer recovers planted features: on activations that are sparse nonnegative codes over known unit directions,
the trained decoder has a row within cosine 0.9 of most planted directions, and held-out data are reconstructed.
A wrong update (a flipped sign, a lost gradient) recovers none: this is the test that trains for real."""

from __future__ import annotations

from functools import cached_property

import jax
import numpy as np

from lenscope.capture import jax_private
from lenscope.dictionaries import Activations, SaeTrainer
from lenscope.dictionaries.evaluate import finish, reconstruction_sums

D, FEATURES, ACTIVE = 16, 32, 3  # input width, planted directions (twice the width), active per token
DIRECTIONS = np.random.default_rng(0).normal(size=(FEATURES, D))
DIRECTIONS /= np.linalg.norm(DIRECTIONS, axis=1, keepdims=True)
SITE = "blocks_0/mlp"


def planted(tokens: int, seed: int) -> Activations:
    """`tokens` rows, each ACTIVE planted directions with weights in [0.5, 1.5] (a sparse nonnegative code)."""
    rng = np.random.default_rng(seed)
    codes = np.zeros((tokens, FEATURES), np.float32)
    chosen = np.argsort(rng.random((tokens, FEATURES)), axis=1)[:, :ACTIVE]
    np.put_along_axis(codes, chosen, rng.uniform(0.5, 1.5, (tokens, ACTIVE)).astype(np.float32), axis=1)
    return Activations({SITE: (codes @ DIRECTIONS).astype(np.float32)}, np.arange(tokens), np.zeros(tokens, np.int64))


class PlantedSae(SaeTrainer):
    """A dictionary trainer whose activations are the planted data instead of a model node's."""

    @cached_property
    def activations(self) -> dict[str, Activations]:
        return {"train": planted(8192, 1), "validation": planted(1024, 2)}


CONFIG = [f"sae/sites=[{SITE}]", "sae/architecture=topk", "sae/expansion=4", f"sae/k={ACTIVE}",
          "training/steps=300", "training/batch_size=256", "optimization/lr=3e-3", "logging/validation_interval=0",
          "logging/checkpoint_interval=0", "logging/report_interval=100", "sae/dashboards=0", "sae/eval_spliced=false"]


def test_the_trained_dictionary_recovers_the_planted_directions(tmp_path):
    trainer = PlantedSae(CONFIG + [f"logging/results={tmp_path / 'results'}"], store=tmp_path / "runs")
    try:
        trainer.setup()
        trainer.run()
        assert jax_private.compiled_count(trainer._train_step) == 1  # one compiled step for the whole run
        d = trainer.dictionaries()[0]
        rows = np.asarray(d.W_dec) / np.linalg.norm(np.asarray(d.W_dec), axis=1, keepdims=True)
        best = (DIRECTIONS @ rows.T).max(axis=1)  # each planted direction's closest decoder row (signed)
        assert (best >= 0.9).mean() >= 0.8, f"recovered {(best >= 0.9).sum()} of {FEATURES}: {np.round(best, 2)}"
        held_out = planted(1024, 3).sites[SITE]
        values, _ = finish(jax.device_get(reconstruction_sums(d, held_out, held_out)))
        assert values["explained_variance"] > 0.8 and values["cossim"] > 0.9 and values["l0"] <= ACTIVE, values
        nodes = trainer.store.query().nonce(trainer.node.nonce).sort("seq").all()
        losses = [v["train/mse_loss"] for v in (trainer.store.get(n).values for n in nodes) if "train/mse_loss" in v]
        assert len(losses) == 3 and losses[-1] < 0.5 * losses[0]  # the reported reconstruction loss fell
    finally:
        trainer.cleanup()
