"""Jobs shared by the table / run_analysis / ops tests: an MLP trainer with a split of any size, and table analyses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from lenscope.analysis import AnalysisBase
from lenscope.analysis.builtin import OpAnalysis
from lenscope.analysis.table_mode import TableConfig, default_columns
from lenscope.config import field
from lenscope.examples.grokking import GrokConfig, GrokTrainer
from lenscope.models import MLPClassifier, Transformer
from lenscope.training import BaseTrainer, TrainerConfig
from lenscope.training.data import ArrayData


@dataclass
class WideConfig(TrainerConfig, TableConfig):
    """A synthetic classification task whose validation split can be made as large as wanted."""

    examples: int = field("data/examples", default=512, help="examples in the validation split")
    width: int = field("data/width", default=8, help="input features")


class WideTrainer(BaseTrainer[WideConfig, MLPClassifier]):
    """A one-hidden-layer MLP on Gaussian inputs labelled by the sign of two features."""

    CONFIG = WideConfig

    def build_model(self) -> MLPClassifier:
        """Hidden layer `dense_0` (16 units), output `dense_1` (4 classes)."""
        return MLPClassifier(features=(16,), n_out=4)

    def build_data(self) -> ArrayData:
        """Deterministic Gaussian inputs; 64 training examples and `data/examples` validation examples."""
        rng = np.random.default_rng(0)

        def split(n: int) -> dict[str, np.ndarray]:
            x = rng.normal(size=(n, self.args.width)).astype(np.float32)
            return {"inputs": x, "labels": ((x[:, 0] > 0) * 2 + (x[:, 1] > 0)).astype(np.int32),
                    "index": np.arange(n, dtype=np.int64)}

        return ArrayData({"train": split(64), "validation": split(self.args.examples)}, self.args.batch_size,
                         self.args.seed)

    def loss(self, params: Any, batch: Mapping[str, jax.Array], key: jax.Array) -> tuple[jax.Array, dict]:
        """Cross-entropy with accuracy."""
        logits = self.model.apply({"params": params}, batch["inputs"])
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).mean()
        return loss, {"accuracy": (logits.argmax(-1) == batch["labels"]).mean()}


class HiddenTable(AnalysisBase[WideConfig, MLPClassifier], WideTrainer):
    """Table: the hidden layer's activations per example, its norm, the label and example index from the batch."""

    NAME = "hidden"
    SCHEMA: ClassVar = {"hidden": "float32[16]", "norm": "float32", "labels": "int32", "index": "int64"}

    def select(self, paths: list[str]) -> str:
        """The hidden layer."""
        return "dense_0"

    def analyze(self, layer: Any, inputs: Any) -> dict[str, jax.Array]:
        """Pre-activation hidden units and their L2 norm, one row per example."""
        hidden = inputs.call(layer)
        return {"hidden": hidden, "norm": jnp.linalg.norm(hidden, axis=-1)}


class StreamTable(AnalysisBase[GrokConfig, Transformer], GrokTrainer):
    """Table on the grokking model: the block's residual stream [3, d_model] (Array2D), label and decoded text."""

    NAME = "stream"

    def output_schema(self) -> Mapping[str, Any]:
        """The stream shape depends on the config."""
        return super().output_schema() or {"stream": ("float32", (3, self.args.d_model)), "labels": "int32",
                                           "text": "string"}

    def select(self, paths: list[str]) -> str:
        """The only block."""
        return "blocks_0"

    def analyze(self, layer: Any, inputs: Any) -> dict[str, jax.Array]:
        """The block's output stream."""
        return {"stream": inputs.call(layer)}

    def columns(self, results: Mapping[str, np.ndarray], batch: Mapping[str, Any]) -> dict[str, Any]:
        """Add the decoded input, e.g. '3+5='."""
        columns = default_columns(self.output_schema(), results, batch)
        tokens = np.asarray(jax.device_get(batch["inputs"]))
        columns["text"] = [f"{a}+{b}=" for a, b, _ in tokens.tolist()]
        return columns

    def plot(self, dataset: Any) -> Any:
        """A histogram-like bar chart of labels, drawn from the table itself."""
        labels = np.asarray(dataset["labels"])
        counts = np.bincount(labels, minlength=self.args.p)
        return self.bar([str(k) for k in range(self.args.p)], counts, title="labels in the table")


class Recorder(OpAnalysis):
    """A general analysis that records its hook calls into EVENTS (a list the test owns)."""

    NAME = "recorder"
    EVENTS: ClassVar[list] = []

    def select(self, paths: list[str]) -> list[str]:
        """Every module but the root."""
        return [p for p in paths if p]

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, jax.Array]:
        """How many layers were captured."""
        return {"layers": jnp.asarray(len(layers))}

    def on_analysis_start(self) -> None:
        """Record."""
        self.EVENTS.append(("start", self.NAME))

    def on_analysis_epoch_end(self, results: Any) -> None:
        """Record."""
        self.EVENTS.append(("epoch_end", self.NAME))

    def on_analysis_end(self, results: Any) -> None:
        """Record."""
        self.EVENTS.append(("end", self.NAME))


class RecordingTable(Recorder):
    """The recorder in table mode: one row per example with its label."""

    NAME = "recording_table"
    SCHEMA: ClassVar = {"labels": "int32", "layers": "int32"}

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, jax.Array]:
        """The layer count, repeated per example."""
        x = inputs[0].args_kwargs()[0][0]
        return {"layers": jnp.full((x.shape[0],), len(layers), jnp.int32)}


class FlaxAttentionModel(nn.Module):
    """A model built on flax's own MultiHeadDotProductAttention (not lenscope's), for the attention op."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """Self-attention over a sequence of 4 positions, then a linear readout."""
        h = nn.Dense(8, name="proj")(x)
        h = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=8, name="mha")(h, h)
        return nn.Dense(4, name="head")(h.mean(axis=1))


class FlaxAttentionTrainer(WideTrainer):
    """WideTrainer on sequences [batch, 4, width] through flax attention."""

    def build_model(self) -> FlaxAttentionModel:
        """The flax-attention model."""
        return FlaxAttentionModel()

    def model_inputs(self, batch: Mapping[str, Any]) -> tuple:
        """The features as a length-4 sequence (repeated, scaled per position)."""
        x = batch["inputs"]
        return (jnp.stack([x * (i + 1) for i in range(4)], axis=1),)

    def loss(self, params: Any, batch: Mapping[str, jax.Array], key: jax.Array) -> tuple[jax.Array, dict]:
        """Cross-entropy."""
        logits = self.model.apply({"params": params}, *self.model_inputs(batch))
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).mean(), {}
