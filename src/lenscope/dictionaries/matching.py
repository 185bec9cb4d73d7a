"""Features across training: dictionaries trained separately at successive checkpoints, matched latent to latent.

Two dictionaries are matched by the cosine similarity of their decoder rows with an optimal one-to-one assignment
(the Hungarian method, `scipy.optimize.linear_sum_assignment`, maximizing the summed similarity; dictionaries of
different widths leave the extra latents of the wider one unmatched). Matching each checkpoint's dictionary to the
next one's chains latents into tracks: a track is born at the first step of its chain and dies at the first step
where its best match is less similar than `threshold` (or that has no latent left for it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError


@dataclass(frozen=True)
class Track:
    """One feature followed over checkpoints: its latent at each step it lives, and the similarity of each link."""

    latents: dict[int, int]  # step -> the latent's index in that step's dictionary
    similarity: tuple[float, ...]  # decoder cosine of each successive pair of `latents` (one fewer than steps)
    birth: int  # the first step it lives at
    death: int | None  # the first step it no longer lives at; None: it lives at the last step

    @property
    def steps(self) -> list[int]:
        """The steps it lives at."""
        return list(self.latents)


def decoder_rows(d: Any) -> np.ndarray:
    """Unit decoder rows [d_sae, d_out] of a Dictionary (or a [d_sae, d_out] array); a zero row stays zero."""
    rows = np.asarray(getattr(d, "W_dec", d), np.float64)
    if rows.ndim != 2:
        raise UsageError(f"a decoder to match is [d_sae, d_out]; got shape {rows.shape} (a stack of dictionaries? "
                         "take one layer's)")
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    return rows / np.where(norms > 0, norms, 1.0)


def match_decoders(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    """(indices [d_sae of a], similarity): for each latent of `a` its latent in `b` (-1: none left) under the
    assignment that maximizes the summed decoder cosine, and that cosine (NaN where unmatched)."""
    from scipy.optimize import linear_sum_assignment  # lazy: scipy.optimize takes most of a second to import

    rows_a, rows_b = decoder_rows(a), decoder_rows(b)
    if rows_a.shape[1] != rows_b.shape[1]:
        raise UsageError(f"decoders of width {rows_a.shape[1]} and {rows_b.shape[1]} cannot be matched: the "
                         "dictionaries must write to one activation")
    cosine = rows_a @ rows_b.T
    left, right = linear_sum_assignment(cosine, maximize=True)
    indices = np.full(len(rows_a), -1, np.int64)
    similarity = np.full(len(rows_a), np.nan)
    indices[left], similarity[left] = right, cosine[left, right]
    return indices, similarity


def feature_tracks(dictionaries: Sequence[Any], steps: Sequence[int], threshold: float = 0.7) -> list[Track]:
    """Every feature's track over `dictionaries` (Dictionaries or decoders [d_sae, d_out], one per step, in step
    order): each latent of the first step starts one, and each later latent no earlier one matched starts one there.

    `threshold`: the least decoder cosine that continues a track from one step to the next.
    """
    steps = [int(s) for s in steps]
    if len(dictionaries) != len(steps) or not steps:
        raise UsageError(f"tracks need one dictionary per step: got {len(dictionaries)} dictionaries and "
                         f"{len(steps)} steps")
    if any(b <= a for a, b in zip(steps, steps[1:])):
        raise UsageError(f"steps must increase, in the dictionaries' order; got {steps}")
    if not -1.0 <= threshold <= 1.0:
        raise UsageError(f"threshold is a cosine similarity, from -1 to 1; got {threshold}")
    live: dict[int, tuple[dict[int, int], list[float]]] = {  # latent at the current step -> its open track
        int(i): ({steps[0]: int(i)}, []) for i in range(len(decoder_rows(dictionaries[0])))}
    done: list[Track] = []
    for prev, (step, d) in enumerate(zip(steps[1:], dictionaries[1:])):
        indices, similarity = match_decoders(dictionaries[prev], d)
        following: dict[int, tuple[dict[int, int], list[float]]] = {}
        for latent, (latents, links) in live.items():
            j = int(indices[latent])
            if j >= 0 and similarity[latent] >= threshold:
                following[j] = ({**latents, step: j}, [*links, float(similarity[latent])])
            else:
                done.append(_track(latents, links, death=step))
        for j in range(len(decoder_rows(d))):
            following.setdefault(j, ({step: j}, []))
        live = following
    done.extend(_track(latents, links, death=None) for latents, links in live.values())
    return sorted(done, key=lambda t: (t.birth, t.latents[t.birth]))


def _track(latents: dict[int, int], links: list[float], death: int | None) -> Track:
    return Track(latents, tuple(links), next(iter(latents)), death)
