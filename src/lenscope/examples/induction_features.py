"""Which dictionary latents fire on repeated tokens: the induction study's read-out of an SAE or a crosscoder.

A token is *repeated* when the `n` tokens ending at it occurred, in that order, earlier in its row: the second
occurrence of a repeated sequence, where an induction head can predict the next token from the first. For each
latent this gives the share of its firings, and of its strongest activations, that fall on repeated tokens, beside
the share of all tokens that are repeated (what a latent blind to repeats would show).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dictionaries import CrosscoderTrainer
from ..dictionaries.dashboards import latent_activations

__all__ = ["repeat_firing", "repeated_positions"]


def repeated_positions(tokens: np.ndarray, n: int = 2) -> np.ndarray:
    """[rows, positions] True where the `n` tokens ending at a position occurred, in that order, earlier in the row."""
    tokens = np.asarray(tokens)
    if n < 1:
        raise ValueError(f"n={n}: a repeated sequence has at least 1 token")
    rows, width = tokens.shape
    out = np.zeros((rows, width), bool)
    if width < n:
        return out
    grams = np.lib.stride_tricks.sliding_window_view(tokens, n, axis=1)  # [rows, width - n + 1, n]
    for r in range(rows):
        _, first, inverse = np.unique(grams[r], axis=0, return_index=True, return_inverse=True)
        out[r, n - 1:] = first[inverse.reshape(-1)] < np.arange(width - n + 1)
    return out


def repeat_firing(trainer: Any, split: str = "train", n: int = 2, top: int = 32, layer: int = 0) -> dict[str, Any]:
    """Per latent of `trainer`'s dictionary (an SAE's or a crosscoder's, set up): where it fires on `split`'s tokens.

    Returns `on_repeats` [d_sae]: the share of its firings on repeated tokens (NaN for a latent that never fires);
    `top_on_repeats` [d_sae]: the same of its `top` strongest activations; `firings` [d_sae]: how many tokens it
    fires on; `baseline`: the share of all tokens that are repeated; `tokens`: how many tokens were read.
    """
    acts = trainer.activations[split]
    latents = latent_activations(trainer.dictionaries()[layer], acts.sites[trainer.inputs[layer]])
    repeated = repeated_positions(_split_tokens(trainer, split), n)[acts.example, acts.position]
    fires = latents > 0
    firings = fires.sum(0)
    on = (fires & repeated[:, None]).sum(0)
    top_share = np.full(latents.shape[1], np.nan)
    for j in np.flatnonzero(firings):
        strongest = np.argsort(-latents[:, j], kind="stable")[:min(top, int(firings[j]))]
        top_share[j] = repeated[strongest].mean()
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(firings > 0, on / np.maximum(firings, 1), np.nan)
    return {"on_repeats": share, "top_on_repeats": top_share, "firings": firings,
            "baseline": float(repeated.mean()), "tokens": int(len(repeated))}


def _split_tokens(trainer: Any, split: str) -> np.ndarray:
    """The model's input rows behind the dictionary's `split` activations ("train": its sae/split)."""
    crosscoder = isinstance(trainer, CrosscoderTrainer)
    model = trainer.model_at(trainer.checkpoints[0]) if crosscoder else trainer.model_trainer()
    try:
        splits = model.data.splits
        name = trainer.args.split if split == "train" else ("validation" if "validation" in splits else
                                                            trainer.args.split)
        return np.asarray(splits[name]["inputs"])
    finally:
        if crosscoder:  # a restored checkpoint of its own; an SAE's model trainer is the SAE's to clean up
            model.cleanup()
