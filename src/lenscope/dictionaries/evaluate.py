"""Evaluation with SAELens' definitions (its `evals.py`), as pure functions of activations and a dictionary.

Per token t, with x the dictionary's input, y its target (x for an SAE) and ŷ its output:
`mse` = mean_t ||y - ŷ||²; `explained_variance` = 1 - mse / (E||y||² - ||E y||²) over all tokens;
`explained_variance_legacy` = mean_t (1 - ||y - ŷ||² / ||y - mean y||²); `cossim` = mean_t cos(y, ŷ);
`l2_ratio` = mean_t ||ŷ|| / ||y|| (norms under 1e-4 count as 1); `relative_reconstruction_bias` =
E||ŷ||² / E<y, ŷ>; `l0` = mean_t #{latents != 0}; `l1` = mean_t sum |latents|; a latent's density is the
fraction of tokens it fires on: `dead_latents` never fire, `dense_latents` fire on more than `dense` of them.
Spliced metrics (`spliced`): the model's loss with the dictionary's output in place of the activation
(`ce_loss_with_sae`), clean (`ce_loss_without_sae`) and with the activation zeroed (`ce_loss_with_ablation`);
`ce_loss_score` = (ablation - sae) / (ablation - clean); KL(clean || patched) summed over the vocabulary and
averaged over tokens gives `kl_div_with_sae`, `kl_div_with_ablation` and `kl_div_score` = 1 - sae / ablation.

Zero cases (a ratio whose denominator is zero): a token whose target or output is the zero vector has cosine
0 (torch's `cosine_similarity`, as SAELens computes it); `relative_reconstruction_bias` is 1 when the output
is zero on every token (nothing to be biased) and NaN when E<y, ŷ> is 0 otherwise; `ce_loss_score` and
`kl_div_score`, when zeroing the site changes nothing (ablation = clean), are 1 if the dictionary changes
nothing either and 0 otherwise, as `explained_variance` is for a constant target; a legacy token whose target
equals the mean target counts as explained when its reconstruction is exact and as 0 otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from .core import Dictionary

EPS = 1e-8  # the floor of a cosine's denominator (torch.nn.functional.cosine_similarity's eps)


def reconstruction_sums(d: Dictionary, x: jax.Array, y: jax.Array) -> dict[str, jax.Array]:
    """Sums over the tokens of one batch [tokens, d] that `finish` turns into SAELens' metrics (streamable)."""
    latents = d.encode(x)
    return output_sums(y, d.decode(latents, x), latents)


def output_sums(y: jax.Array, out: jax.Array, latents: jax.Array) -> dict[str, jax.Array]:
    """reconstruction_sums of a target y, an output and the latents that made it (a crosscoder's: one model's part)."""
    rss = jnp.sum((y - out) ** 2, axis=-1)
    norm_in, norm_out = jnp.linalg.norm(y, axis=-1), jnp.linalg.norm(out, axis=-1)
    centred = jnp.sum((y - y.mean(0)) ** 2, axis=-1)
    cos = jnp.sum(y * out, -1) / jnp.maximum(norm_in * norm_out, EPS)
    ev_legacy = jnp.where(centred > 0, 1 - rss / jnp.where(centred > 0, centred, 1.0), jnp.where(rss > 0, 0.0, 1.0))
    return {
        "tokens": jnp.asarray(y.shape[0], jnp.float32),
        "rss": rss.sum(), "sum_x": y.sum(0), "sum_x2": jnp.sum(y**2),
        "ev_legacy": jnp.sum(ev_legacy), "cossim": jnp.sum(cos),
        "l2_in": norm_in.sum(), "l2_out": norm_out.sum(),
        "l2_ratio": jnp.sum(norm_out / jnp.where(jnp.abs(norm_in) < 1e-4, 1.0, norm_in)),
        "out2": jnp.sum(norm_out**2), "dot": jnp.sum(y * out),
        "l0": jnp.sum(latents != 0), "l1": jnp.sum(jnp.abs(latents)),
        "fired": jnp.sum(latents != 0, axis=0).astype(jnp.float32),
    }


def add(a: Mapping[str, jax.Array] | None, b: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
    """Two batches' sums, added."""
    return dict(b) if a is None else {k: a[k] + b[k] for k in b}


def finish(sums: Mapping[str, Any], dense: float = 0.1) -> tuple[dict[str, float], Any]:
    """(SAELens' scalar metrics, per-latent density [d_sae]) from the summed batches (NumPy or JAX arrays)."""
    n = float(sums["tokens"])
    mse = float(sums["rss"]) / n
    mean_x = jnp.asarray(sums["sum_x"], jnp.float64 if jax.config.jax_enable_x64 else jnp.float32) / n
    variance = float(sums["sum_x2"]) / n - float(jnp.sum(mean_x**2))
    ev = (1.0 if mse < 1e-10 else 0.0) if variance < 1e-10 else 1.0 - mse / variance
    density = jnp.asarray(sums["fired"]) / n
    metrics = {
        "mse": mse, "explained_variance": ev, "explained_variance_legacy": float(sums["ev_legacy"]) / n,
        "cossim": float(sums["cossim"]) / n, "l2_norm_in": float(sums["l2_in"]) / n,
        "l2_norm_out": float(sums["l2_out"]) / n, "l2_ratio": float(sums["l2_ratio"]) / n,
        "relative_reconstruction_bias": _bias(float(sums["out2"]), float(sums["dot"])),
        "l0": float(sums["l0"]) / n, "l1": float(sums["l1"]) / n,
        "dead_latents": int(jnp.sum(density == 0)), "dense_latents": int(jnp.sum(density > dense)),
    }
    return metrics, density


def _bias(out2: float, dot: float) -> float:
    """E||ŷ||² / E<y, ŷ>: 1 for a zero output, NaN when only the inner product is zero."""
    if dot != 0:
        return out2 / dot
    return 1.0 if out2 == 0 else float("nan")


def score(reference: jax.Array, patched: jax.Array, clean: jax.Array) -> jax.Array:
    """(reference - patched) / (reference - clean), the share of the reference's damage the patch avoids; when
    the reference equals clean, 1 if the patched value does too, else 0 (traceable)."""
    gap = reference - clean
    ratio = (reference - patched) / jnp.where(gap == 0, 1.0, gap)
    return jnp.where(gap == 0, jnp.where(patched == clean, 1.0, 0.0), ratio)


def kl(clean_logits: jax.Array, logits: jax.Array) -> jax.Array:
    """KL(clean || patched) per token, summed over the last (vocabulary) axis."""
    p_log = jax.nn.log_softmax(clean_logits, -1)
    return jnp.sum(jnp.exp(p_log) * (p_log - jax.nn.log_softmax(logits, -1)), -1)


def spliced(loss_fn: Callable[[Any], tuple[jax.Array, jax.Array]], sae: Any, ablate: Any) -> dict[str, jax.Array]:
    """CE and KL with the dictionary spliced in and with the site zeroed, against the clean model.

    `loss_fn(patch)` returns (loss, logits) of the model with `patch` applied (None: clean); `sae` and
    `ablate` are the two patches. Traceable: the three forwards run in one program.
    """
    clean, clean_logits = loss_fn(None)
    with_sae, sae_logits = loss_fn(sae)
    ablated, ablated_logits = loss_fn(ablate)
    kl_sae, kl_ablation = jnp.mean(kl(clean_logits, sae_logits)), jnp.mean(kl(clean_logits, ablated_logits))
    return {"ce_loss_without_sae": clean, "ce_loss_with_sae": with_sae, "ce_loss_with_ablation": ablated,
            "ce_loss_score": score(ablated, with_sae, clean),
            "kl_div_with_sae": kl_sae, "kl_div_with_ablation": kl_ablation,
            "kl_div_score": score(kl_ablation, kl_sae, jnp.zeros_like(kl_sae))}
