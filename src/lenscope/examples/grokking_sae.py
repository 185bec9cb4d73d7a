"""`grokking/sae`: a sparse dictionary trained on the grokking model's activations; `grokking/crosscoder`: one over
several checkpoints of a grokking run (docs/dictionaries.md)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..capture import backend_for
from ..dictionaries import CrosscoderTrainer, SaeTrainer, Site, attach, run_with_features
from ..dictionaries.activations import record_sites
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


def pair_tokens(model: Any) -> np.ndarray:
    """Every (a, b) pair of the grokking model's task as its tokens [p * p, 3], `a b =` in (a, b) order."""
    p = int(model.args.p)
    equals = int(np.asarray(model.batch("validation", 0)["inputs"])[0, -1])
    a, b = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    return np.stack([a.ravel(), b.ravel(), np.full(p * p, equals)], axis=1).astype(np.int32)


def grid_latents(trainer: GrokSae | GrokCrosscoder, site: int = 0) -> np.ndarray:
    """A dictionary's latents at `=` over every (a, b) pair [p, p, d_sae].

    An SAE (`grokking/sae`) is attached at its `site` of the model it explains; a crosscoder (`grokking/crosscoder`)
    reads every checkpoint it was trained on: each checkpoint's model runs over the pairs, its activations at the
    crosscoder's sites at `=` are put side by side in the crosscoder's block order and encoded (`site` is unused:
    a crosscoder's latents read all its sites).
    """
    if isinstance(trainer, CrosscoderTrainer):
        return _crosscoder_grid(trainer)
    model = trainer.model_trainer()
    p = int(model.args.p)
    forward = model.module(model.state.params)
    attached = [attach(trainer.dictionaries()[site], trainer.args.sites[site])]
    _, latents = jax.jit(lambda t: run_with_features(forward, (t,), attached))(pair_tokens(model))
    return np.asarray(next(iter(latents.values())))[:, -1].reshape(p, p, -1)  # at `=`: [a, b, latent]


def _crosscoder_grid(trainer: CrosscoderTrainer) -> np.ndarray:
    """`grid_latents` of a crosscoder: every checkpoint's model over the pairs, side by side, encoded."""
    sites = [Site.parse(s) for s in trainer.args.sites]
    blocks: dict[tuple[int, str], np.ndarray] = {}
    for node in trainer.checkpoints:
        model = trainer.model_at(node)
        try:
            tokens, p = pair_tokens(model), int(model.args.p)

            @jax.jit
            def at_equals(params: Any, t: jax.Array, model: Any = model) -> dict[str, jax.Array]:
                acts = record_sites(model.module(params), (t,), sites, backend_for(model.model))
                return {k: v[:, -1].astype(jnp.float32) for k, v in acts.items()}

            for name, value in jax.device_get(at_equals(model.state.params, tokens)).items():
                blocks[node.seq, name] = np.asarray(value)
        finally:
            model.cleanup()
    x = np.concatenate([blocks[step, str(Site.parse(s))] for step, s in trainer.blocks], axis=-1)
    latents = jax.jit(lambda d, v: d.encode(v))(trainer.dictionaries()[0], jnp.asarray(x))
    return np.asarray(latents).reshape(p, p, -1)


def frequency_pairs(acts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pair [n, 2], share [n]) of activations over every (a, b) pair [p, p, n]: each one's dominant frequency pair
    (k_a, k_b) of its 2-D Fourier transform, folded onto 0..p//2, and the part of its non-constant power there."""
    p = acts.shape[0]
    power = np.abs(np.fft.fft2(acts, axes=(0, 1))) ** 2
    power[0, 0] = 0.0  # the constant part says nothing about frequencies
    half = p // 2 + 1
    folds = _fold(np.arange(p), p)
    folded = np.zeros((half * half, power.shape[-1]))  # [folded pair, latent]
    np.add.at(folded, (folds[:, None] * half + folds[None, :]).ravel(), power.reshape(p * p, -1))
    best = folded.argmax(axis=0)
    total = folded.sum(axis=0)
    share = np.where(total > 0, folded[best, np.arange(len(best))] / np.maximum(total, 1e-30), 0.0)
    return np.stack(np.divmod(best, half), axis=1), share


def key_frequencies(model: Any, keys: int = 5) -> list[int]:
    """The model's key frequencies: its embedding's `keys` largest Fourier frequencies (what `grokking/fourier` plots
    and `grokking/summary` records as `top_frequencies`), sorted."""
    embedding = model.module(model.state.params).embed.embedding
    _, top = top_fraction(embedding_spectrum(jnp.asarray(embedding), int(model.args.p)), keys)
    return sorted(int(k) for k in np.asarray(top))


def latent_frequencies(sae: GrokSae | GrokCrosscoder, site: int = 0, keys: int = 5) -> dict[str, Any]:
    """Each latent's activation at `=` over every (a, b) pair, read as Fourier frequencies of a and b.

    Returns `pair` [d_sae, 2]: the latent's dominant (k_a, k_b), folded onto 0..p//2; `share` [d_sae]: the part of
    its non-constant power at that frequency pair (1.0: one pure frequency pair); `density` [d_sae]: how often it
    fires over all pairs; `keys`: the embedding's `keys` largest frequencies (the model's key frequencies). A
    crosscoder's latents read every checkpoint it was trained on (`grid_latents`), and its `keys` are its last
    checkpoint's.
    """
    acts = grid_latents(sae, site)
    pair, share = frequency_pairs(acts)
    if isinstance(sae, CrosscoderTrainer):
        model = sae.model_at(sae.checkpoints[-1])
        try:
            found = key_frequencies(model, keys)
        finally:
            model.cleanup()
    else:
        found = key_frequencies(sae.model_trainer(), keys)
    return {"pair": pair, "share": share, "density": (acts > 0).mean(axis=(0, 1)), "keys": found}
