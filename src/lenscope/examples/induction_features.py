"""Which dictionary latents fire on repeated tokens: the induction study's read-out of an SAE or a crosscoder.

A token's *role* in its row: a **repeat** when the `n` tokens ending at it occurred, in that order, earlier in the row
(the second occurrence of a repeated sequence, where an induction head can predict the next token from the first);
a **first occurrence** when they occur again later and not before; else neither. For each latent this gives the
share of its firings, and of its strongest activations, on repeats and on first occurrences, beside the share of all
tokens in each role (what a latent blind to repeats would show). A latent of the induction mechanism fires on
repeats and not on first occurrences; one that fires on both reads something else (a run of random tokens, say).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dictionaries import CrosscoderTrainer
from ..dictionaries.dashboards import latent_activations

__all__ = ["FIRST", "NEITHER", "REPEAT", "repeat_firing", "repeat_roles"]

NEITHER, FIRST, REPEAT = 0, 1, 2


def repeat_roles(tokens: np.ndarray, n: int = 2) -> np.ndarray:
    """[rows, positions] int8: REPEAT where the `n` tokens ending at a position occurred, in that order, earlier in
    the row; FIRST where they occur again later (and not earlier); NEITHER elsewhere."""
    tokens = np.asarray(tokens)
    if n < 1:
        raise ValueError(f"n={n}: a repeated sequence has at least 1 token")
    rows, width = tokens.shape
    out = np.full((rows, width), NEITHER, np.int8)
    if width < n:
        return out
    grams = np.lib.stride_tricks.sliding_window_view(tokens, n, axis=1)  # [rows, width - n + 1, n]
    index = np.arange(width - n + 1)
    for r in range(rows):
        _, first, inverse, counts = np.unique(grams[r], axis=0, return_index=True, return_inverse=True,
                                              return_counts=True)
        inverse = inverse.reshape(-1)
        repeat = first[inverse] < index
        out[r, n - 1:] = np.where(repeat, REPEAT, np.where(counts[inverse] > 1, FIRST, NEITHER))
    return out


def repeat_firing(trainer: Any, split: str = "train", n: int = 2, top: int = 32, layer: int = 0) -> dict[str, Any]:
    """Per latent of `trainer`'s dictionary (an SAE's or a crosscoder's, set up): where it fires on `split`'s tokens.

    Returns, each [d_sae] (NaN for a latent that never fires on them): `on_repeats` and `on_firsts`, the share of its
    firings on repeats and on first occurrences; `top_on_repeats` and `top_on_firsts`, the same of its `top`
    strongest activations; and `firings`, how many tokens it fires on; `baseline` and `baseline_firsts`, the share
    of all tokens that are repeats and first occurrences; `tokens`, how many tokens were read.
    """
    acts = trainer.activations[split]
    latents = latent_activations(trainer.dictionaries()[layer], acts.sites[trainer.inputs[layer]])
    roles = repeat_roles(_split_tokens(trainer, split), n)[acts.example, acts.position]
    fires = latents > 0
    firings = fires.sum(0)
    found: dict[str, Any] = {"firings": firings, "tokens": int(len(roles)),
                             "baseline": float((roles == REPEAT).mean()),
                             "baseline_firsts": float((roles == FIRST).mean())}
    strongest = {j: np.argsort(-latents[:, j], kind="stable")[:min(top, int(firings[j]))]
                 for j in np.flatnonzero(firings)}
    for name, role in (("repeats", REPEAT), ("firsts", FIRST)):
        on = (fires & (roles == role)[:, None]).sum(0)
        found[f"on_{name}"] = np.where(firings > 0, on / np.maximum(firings, 1), np.nan)
        found[f"top_on_{name}"] = np.full(latents.shape[1], np.nan)
        for j, rows in strongest.items():
            found[f"top_on_{name}"][j] = (roles[rows] == role).mean()
    return found


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
