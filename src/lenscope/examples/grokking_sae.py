"""`grokking/sae`: a sparse dictionary trained on the grokking model's activations (docs/dictionaries.md)."""

from __future__ import annotations

from ..dictionaries import SaeTrainer
from ..job_registry import job


@job("grokking/sae")
class GrokSae(SaeTrainer):
    """A TopK SAE on the MLP output of the grokked model, every position (`--base` the model's checkpoint node)."""
