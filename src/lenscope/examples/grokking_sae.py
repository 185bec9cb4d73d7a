"""`grokking/sae`: a sparse dictionary trained on the grokking model's activations; `grokking/crosscoder`: one over
several checkpoints of a grokking run (docs/dictionaries.md)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..dictionaries import CrosscoderTrainer, SaeTrainer, attach, run_with_features
from ..job_registry import job
from .grokking_analyses import embedding_spectrum, top_fraction


@job("grokking/sae")
class GrokSae(SaeTrainer):
    """A TopK SAE on the MLP output of the grokked model, every position (`--base` the model's checkpoint node)."""


@job("grokking/crosscoder")
class GrokCrosscoder(CrosscoderTrainer):
    """A crosscoder on the MLP output over checkpoints of a grokking run (`--base` the run, `crosscoder/steps`)."""


def _fold(k: np.ndarray, p: int) -> np.ndarray:
    """Frequencies 0..p-1 folded onto 0..p//2 (k and p - k are one real frequency)."""
    return np.minimum(k, p - k)


def latent_frequencies(sae: GrokSae, site: int = 0, keys: int = 5) -> dict[str, Any]:
    """Each latent's activation at `=` over every (a, b) pair, read as Fourier frequencies of a and b.

    Returns `pair` [d_sae, 2]: the latent's dominant (k_a, k_b), folded onto 0..p//2; `share` [d_sae]: the part of
    its non-constant power at that frequency pair (1.0: one pure frequency pair); `density` [d_sae]: how often it
    fires over all pairs; `keys`: the embedding's `keys` largest frequencies (the model's key frequencies).
    """
    model = sae.model_trainer()
    p = int(model.args.p)
    forward = model.module(model.state.params)
    equals = int(np.asarray(model.batch("validation", 0)["inputs"])[0, -1])
    a, b = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    tokens = np.stack([a.ravel(), b.ravel(), np.full(p * p, equals)], axis=1).astype(np.int32)
    attached = [attach(sae.dictionaries()[site], sae.args.sites[site])]
    _, latents = jax.jit(lambda t: run_with_features(forward, (t,), attached))(tokens)
    acts = np.asarray(next(iter(latents.values())))[:, -1].reshape(p, p, -1)  # at `=`: [a, b, latent]
    power = np.abs(np.fft.fft2(acts, axes=(0, 1))) ** 2
    power[0, 0] = 0.0  # the constant part says nothing about frequencies
    half = p // 2 + 1
    folds = _fold(np.arange(p), p)
    folded = np.zeros((half * half, power.shape[-1]))  # [folded pair, latent]
    np.add.at(folded, (folds[:, None] * half + folds[None, :]).ravel(), power.reshape(p * p, -1))
    best = folded.argmax(axis=0)
    total = folded.sum(axis=0)
    share = np.where(total > 0, folded[best, np.arange(len(best))] / np.maximum(total, 1e-30), 0.0)
    _, top = top_fraction(embedding_spectrum(jnp.asarray(forward.embed.embedding), p), keys)
    return {"pair": np.stack(np.divmod(best, half), axis=1), "share": share,
            "density": (acts > 0).mean(axis=(0, 1)), "keys": sorted(int(k) for k in np.asarray(top))}
