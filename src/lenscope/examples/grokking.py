"""Built-in grokking example: a 1-layer transformer learns a + b mod p, memorizes, then generalizes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
import optax

from ..config import field
from ..errors import ConfigError
from ..job_registry import job
from ..models import Transformer
from ..training import BaseTrainer, TrainerConfig
from ..training.data import ArrayData
from ..training.pretrained import PretrainedConfig, PretrainedModel
from .grokking_data import make_splits


@dataclass
class GrokAnalysisConfig:
    """Settings the grokking analyses read (composed into the trainer's CONFIG for tandem use)."""

    topk: int = field("analysis/topk", default=5, help="frequencies counted as 'key' in the spectrum summary")
    examples: int = field("analysis/examples", default=16, help="examples whose attention patterns are kept")


@dataclass
class GrokConfig(TrainerConfig, GrokAnalysisConfig, PretrainedConfig):
    """Task and model sizes of the grokking example; refines the trainer defaults for full-batch grokking."""

    p: int = field("data/p", default=59, ge=2, help="modulus of a + b mod p (the '=' token is p)")
    train_fraction: float = field(
        "data/train_fraction", default=0.4, gt=0, le=1, help="fraction of all (a, b) pairs used for training"
    )
    d_model: int = field("model/d_model", ge=1, default=64, help="residual stream width")
    n_heads: int = field("model/n_heads", ge=1, default=4, help="attention heads per block")
    d_head: int = field("model/d_head", ge=1, default=16, help="width of each attention head")
    d_mlp: int = field("model/d_mlp", ge=1, default=256, help="hidden width of each MLP")
    n_layers: int = field("model/n_layers", ge=1, default=1, help="transformer blocks")
    backend: Literal["linen", "nnx", "equinox"] = field(
        "model/backend", default="linen", help="model library: linen, nnx (Flax NNX) or equinox"
    )
    # Refined trainer defaults (help text is inherited from TrainerConfig).
    steps: int = field("training/steps", default=2000)
    batch_size: int = field("training/batch_size", default=0)
    lr: float = field("optimization/lr", default=3e-3)
    warmup_steps: int = field("optimization/warmup_steps", default=50)
    weight_decay: float = field("optimization/weight_decay", default=2.0)
    b2: float = field("optimization/b2", default=0.98)
    validation_interval: int = field("logging/validation_interval", default=500)
    checkpoint_interval: int = field("logging/checkpoint_interval", default=500)
    headline: list[str] = field("logging/headline", default=[
        "train/accuracy", "val/accuracy", "train/loss", "val/loss", "analysis/summary/topk_share"])


@job("grokking/train")
class GrokTrainer(PretrainedModel, BaseTrainer[GrokConfig, Transformer]):
    """Full-batch AdamW with strong weight decay on a fraction of all a + b mod p pairs.

    With `model/pretrained` the model is that checkpoint's decoder (token ids 0..p as they are, the answer
    read from the logits at '='), and the `model/*` sizes and `model/backend` are the checkpoint's.
    """

    CONFIG = GrokConfig
    SHARED_STEP = True  # the step reads only the config, --base and the data its config names

    def build_model(self) -> Any:
        """A small transformer reading [a, b, =] and predicting at the last position, in `model/backend`'s library."""
        a = self.args
        if a.pretrained:
            decoder = self.pretrained.model
            if decoder.config.vocab_size < a.p + 1:
                raise ConfigError(f"model/pretrained={a.pretrained} has {decoder.config.vocab_size} tokens; "
                                  f"data/p={a.p} needs at least {a.p + 1} (the residues and '=')")
            return decoder
        sizes = dict(vocab_size=a.p + 1, seq_len=3, d_model=a.d_model, n_heads=a.n_heads, d_head=a.d_head,
                     d_mlp=a.d_mlp, n_layers=a.n_layers, n_out=a.p)
        if a.backend == "nnx":
            from flax import nnx as flax_nnx  # lazy: flax.nnx is slow to import and a linen job never needs it

            from ..models import nnx  # lazy: the NNX models, with flax.nnx
            return nnx.Transformer(**sizes, rngs=flax_nnx.Rngs(a.seed))
        if a.backend == "equinox":
            # lazy: equinox is slow to import and a linen job never needs it
            from ..models import equinox
            return equinox.Transformer(**sizes, key=jax.random.key(a.seed))
        return Transformer(**sizes)

    def block_path(self, index: int) -> str:
        """The module path of block `index` (linen names list members `blocks_0`, NNX and Equinox `blocks/0`)."""
        return f"blocks_{index}" if self.args.backend == "linen" and not self.args.pretrained else f"blocks/{index}"

    def build_data(self) -> ArrayData:
        """All pairs, split into train and held-out validation/test sets from the seed."""
        splits = make_splits(self.args.p, self.args.train_fraction, self.args.seed)
        arrays = {name: {"inputs": s["tokens"], "labels": s["labels"], "a": s["a"], "b": s["b"]}
                  for name, s in splits.items()}
        return ArrayData(arrays, self.args.batch_size, self.args.seed)

    def corrupt(self, batch: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
        """The patching ops' corrupted batch: `a` replaced by a + 1 (mod p), so the answer moves by one."""
        p = self.args.p
        a = (batch["a"] + 1) % p
        return {**batch, "a": a, "inputs": batch["inputs"].at[:, 0].set(a), "labels": (a + batch["b"]) % p}

    def token_strings(self, ids: Any) -> list[str]:
        """How tokens read in dashboards: residues as numbers, token p as '='."""
        return ["=" if int(t) == self.args.p else str(int(t)) for t in ids]

    def unembed(self, params: Any, resid: jax.Array) -> jax.Array:
        """Logits of a residual stream [..., d_model] through the model's final unembedding (logit lens)."""
        return self.module(params).unembed_fn(resid)

    def loss(self, params: Any, batch: Mapping[str, jax.Array], key: jax.Array) -> tuple[jax.Array, dict]:
        """Cross-entropy of the answer at the '=' position, with accuracy."""
        logits = self.module(params)(batch["inputs"])[:, -1, :]
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).mean()
        accuracy = (jnp.argmax(logits, -1) == batch["labels"]).mean()
        return loss, {"accuracy": accuracy}
