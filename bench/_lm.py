"""A language model on random tokens (linen, NNX or Equinox): the workload of bench/capture.py and bench/mesh.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx

from lenscope.config import field
from lenscope.models import Transformer, equinox
from lenscope.models import nnx as nnx_models
from lenscope.training import BaseTrainer, TrainerConfig
from lenscope.training.data import ArrayData


@dataclass
class LMConfig(TrainerConfig):
    """A small language model on random tokens, sized on the command line."""

    vocab: int = field("data/vocab", default=512, help="vocabulary size")
    seq: int = field("data/seq", default=64, help="tokens per example")
    examples: int = field("data/examples", default=256, help="examples per split")
    d_model: int = field("model/d_model", default=256, help="residual width")
    n_layers: int = field("model/n_layers", default=4, help="blocks")
    backend: str = field("model/backend", default="linen", help="linen, nnx or equinox")


class LMTrainer(BaseTrainer[LMConfig, Transformer]):
    """Next-token prediction on random tokens: only here to give a multi-block transformer a trainer."""

    CONFIG = LMConfig

    def build_model(self) -> Any:
        """A pre-LayerNorm decoder, 8 heads of width d_model/8, an MLP 4x as wide, in `model/backend`'s library."""
        a = self.args
        sizes = dict(vocab_size=a.vocab, seq_len=a.seq, d_model=a.d_model, n_heads=8, d_head=a.d_model // 8,
                     d_mlp=4 * a.d_model, n_layers=a.n_layers, use_ln=True)
        if a.backend == "nnx":
            return nnx_models.Transformer(**sizes, rngs=nnx.Rngs(a.seed))
        if a.backend == "equinox":
            return equinox.Transformer(**sizes, key=jax.random.key(a.seed))
        return Transformer(**sizes)

    def build_data(self) -> ArrayData:
        """Random token sequences for train and validation."""
        rng = np.random.default_rng(self.args.seed)
        shape = (self.args.examples, self.args.seq)
        splits = {name: {"inputs": rng.integers(0, self.args.vocab, shape, np.int32)}
                  for name in ("train", "validation")}
        return ArrayData(splits, self.args.batch_size, self.args.seed)

    def loss(self, params: Any, batch: Mapping[str, jax.Array], key: jax.Array) -> tuple[jax.Array, dict]:
        """Next-token cross-entropy."""
        logits = self.module(params)(batch["inputs"])[:, :-1]
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["inputs"][:, 1:]).mean(), {}
