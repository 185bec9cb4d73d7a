"""Analyses of the grokking model: embedding Fourier spectrum, attention patterns, and a JSON summary.

They run standalone (`lenscope run grokking/fourier [--base NODE]`) and in tandem with
`grokking/train`, which declares them in ANALYSIS.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..analysis import AnalysisBase
from ..job_registry import job
from ..models import Transformer
from ..models.transformer import Attention, attention_pattern
from .grokking import GrokConfig, GrokTrainer


def embedding_spectrum(table: jax.Array, p: int) -> jax.Array:
    """Norm of the token embedding per Fourier frequency 0..p//2 over the residues 0..p-1."""
    coefficients = jnp.fft.rfft(table[:p].astype(jnp.float32), axis=0)
    return jnp.sqrt(jnp.sum(jnp.abs(coefficients) ** 2, axis=-1))


def top_fraction(norms: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """Share of the non-constant spectrum's energy in its k largest frequencies, and those frequencies."""
    energy = norms[1:] ** 2
    top = jnp.argsort(-energy)[:k]
    return energy[top].sum() / energy.sum(), top + 1


@job("grokking/fourier")
class FourierAnalysis(AnalysisBase[GrokConfig, Transformer], GrokTrainer):
    """Fourier spectrum of the token embedding; goes sparse as the model generalizes."""

    NAME = "fourier"

    def select(self, paths: list[str]) -> str:
        """The token embedding."""
        return "embed"

    def analyze(self, layer: Any, inputs: Any) -> dict[str, jax.Array]:
        """Embedding norm per frequency (a vector of p//2 + 1 numbers)."""
        return {"norm": embedding_spectrum(layer.embedding, self.args.p)}

    def plot(self, results: dict[str, np.ndarray]) -> Any:
        """Bar chart of the norm per frequency."""
        norm = results["norm"]
        return self.bar([str(k) for k in range(len(norm))], norm, title=f"Embedding spectrum at {self.node}",
                        xlabel="frequency k", ylabel="norm of Fourier component")


@job("grokking/attention")
class AttentionAnalysis(AnalysisBase[GrokConfig, Transformer], GrokTrainer):
    """Attention patterns of every head of every block (a list selection)."""

    NAME = "attention"
    # the model's, whichever library (model/backend); named by path, the NNX and Equinox ones load only when used
    TARGET = (Attention, "lenscope.models.nnx.Attention", "lenscope.models.equinox.Attention")

    def select(self, paths: list[str]) -> list[str]:
        """Every attention module, in call order."""
        return list(paths)

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, jax.Array]:
        """Mean pattern per head [blocks, heads, q, k] and the first few examples' patterns."""
        patterns = [attention_pattern(layer.query(x.x), layer.key(x.x), x.mask) for layer, x in zip(layers, inputs)]
        stacked = jnp.stack(patterns, axis=1)  # [batch, blocks, heads, q, k]
        return {"mean": stacked.mean(axis=0), "examples": stacked[: self.args.examples]}

    def plot(self, results: dict[str, np.ndarray]) -> Any:
        """One heatmap per (block, head) of the mean pattern."""
        mean = results["mean"]
        blocks, heads = mean.shape[:2]
        return self.heatmaps([mean[b, h] for b in range(blocks) for h in range(heads)],
                             titles=[f"block {b} head {h}" for b in range(blocks) for h in range(heads)],
                             xlabel="key", ylabel="query", xticklabels=["a", "b", "="], yticklabels=["a", "b", "="],
                             title=f"Mean attention at {self.node}")


@job("grokking/summary")
class SummaryAnalysis(AnalysisBase[GrokConfig, Transformer], GrokTrainer):
    """JSON: spectrum sparsity (top-k share) and accuracy on the analysis batch, to read the trend without PDFs."""

    NAME = "summary"

    def select(self, paths: list[str]) -> list[str]:
        """The embedding and the whole model."""
        return ["embed", ""]

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, jax.Array]:
        """Top-k share of the spectrum, its frequencies, and accuracy on the batch."""
        embed, model = layers
        share, top = top_fraction(embedding_spectrum(embed.embedding, self.args.p), self.args.topk)
        tokens = inputs[1].tokens
        logits = model(**inputs[1])[:, -1, :]
        labels = (tokens[:, 0] + tokens[:, 1]) % self.args.p
        return {"topk_share": share, "top_frequencies": top, "accuracy": (logits.argmax(-1) == labels).mean()}

    def plot(self, results: dict[str, np.ndarray]) -> dict[str, Any]:
        """The summary as JSON, tied to the node it describes."""
        return {"node": str(self.node), "seq": self.node.seq, "topk": self.args.topk,
                "topk_share": float(results["topk_share"]),
                "top_frequencies": [int(k) for k in results["top_frequencies"]],
                "accuracy": float(results["accuracy"])}


GrokTrainer.ANALYSIS = (FourierAnalysis, AttentionAnalysis, SummaryAnalysis)
