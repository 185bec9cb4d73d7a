"""Built-in grokking example: a 1-layer transformer learns a + b mod p, memorizes, then generalizes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax

from ..config import field
from ..models import Transformer
from ..registry import job
from ..training import BaseTrainer, TrainerConfig
from ..training.data import ArrayData
from .grokking_data import make_splits


@dataclass
class GrokAnalysisConfig:
    """Settings the grokking analyses read (composed into the trainer's CONFIG for tandem use)."""

    topk: int = field("analysis/topk", default=5, help="frequencies counted as 'key' in the spectrum summary")
    examples: int = field("analysis/examples", default=16, help="examples whose attention patterns are kept")


@dataclass
class GrokConfig(TrainerConfig, GrokAnalysisConfig):
    """Task and model sizes of the grokking example, on top of the standard trainer paths."""

    p: int = field("data/p", default=97, help="modulus of a + b mod p (the '=' token is p)")
    train_fraction: float = field("data/train_fraction", default=0.3, help="fraction of all (a, b) pairs used for training")
    d_model: int = field("model/d_model", default=128, help="residual stream width")
    n_heads: int = field("model/n_heads", default=4, help="attention heads per block")
    d_head: int = field("model/d_head", default=32, help="width of each attention head")
    d_mlp: int = field("model/d_mlp", default=512, help="hidden width of each MLP")
    n_layers: int = field("model/n_layers", default=1, help="transformer blocks")


def overrides_for_defaults() -> dict[str, Any]:
    """Trainer defaults that suit grokking (full batch, strong weight decay)."""
    return {
        "training": {"steps": 3000, "batch_size": 0},
        "optimization": {"lr": 1e-3, "weight_decay": 1.0, "b1": 0.9, "b2": 0.98, "warmup_steps": 10},
        "logging": {"report_interval": 50, "validation_interval": 250, "checkpoint_interval": 1000},
    }


@job("grokking/train")
class GrokTrainer(BaseTrainer[GrokConfig, Transformer]):
    """Full-batch AdamW with strong weight decay on a fraction of all a + b mod p pairs."""

    CONFIG = GrokConfig

    def build_model(self) -> Transformer:
        """A small transformer reading [a, b, =] and predicting at the last position."""
        a = self.args
        return Transformer(vocab_size=a.p + 1, seq_len=3, d_model=a.d_model, n_heads=a.n_heads, d_head=a.d_head,
                           d_mlp=a.d_mlp, n_layers=a.n_layers, n_out=a.p)

    def build_data(self) -> ArrayData:
        """All pairs, split into train and held-out validation/test sets from the seed."""
        splits = make_splits(self.args.p, self.args.train_fraction, self.args.seed)
        arrays = {name: {"inputs": s["tokens"], "labels": s["labels"], "a": s["a"], "b": s["b"]}
                  for name, s in splits.items()}
        return ArrayData(arrays, self.args.batch_size, self.args.seed)

    def loss(self, params: Any, batch: Mapping[str, jax.Array], key: jax.Array) -> tuple[jax.Array, dict]:
        """Cross-entropy of the answer at the '=' position, with accuracy."""
        logits = self.model.apply({"params": params}, batch["inputs"])[:, -1, :]
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).mean()
        accuracy = (jnp.argmax(logits, -1) == batch["labels"]).mean()
        return loss, {"accuracy": accuracy}
