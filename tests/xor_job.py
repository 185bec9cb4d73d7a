"""The source of a tiny job module (an MLP on a toy task) that tests write to a folder and run as a user's job."""

XOR_JOB = '''\
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
import optax

from lenscope import AnalysisBase, ArrayData, BaseTrainer, TrainerConfig, field
from lenscope.models import MLPClassifier


@dataclass
class XorConfig(TrainerConfig):
    steps: int = field("training/steps", default=4, help="steps")
    checkpoint_interval: int = field("logging/checkpoint_interval", default=4, help="checkpoint every N steps")


class Xor(BaseTrainer[XorConfig, MLPClassifier]):
    """A tiny MLP on a toy task: trains in a blink."""

    CONFIG = XorConfig

    def build_model(self):
        return MLPClassifier(features=(8,), n_out=2)

    def build_data(self):
        x = np.random.default_rng(0).normal(size=(64, 2)).astype(np.float32)
        y = (x[:, 0] > 0).astype(np.int32)
        return ArrayData({"train": {"inputs": x, "labels": y}, "validation": {"inputs": x, "labels": y}},
                         batch_size=32, seed=0)

    def loss(self, params, batch, key):
        logits = self.model.apply({"params": params}, batch["inputs"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).mean(), {}
'''
