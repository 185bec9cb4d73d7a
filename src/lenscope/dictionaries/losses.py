"""Training losses of each architecture, as SAELens defines them, pure and vmappable over a stack of layers.

Reconstruction: `mse_loss` = squared error summed over the output's features, averaged over tokens.
Sparsity: standard (ReLU) adds `l1_coefficient * mean_t ||f(x) * ||W_dec rows|| ||_p`; JumpReLU adds
`l0_coefficient * mean_t L0` through a straight-through step of the threshold (rectangle kernel of
`bandwidth`); TopK and BatchTopK add the AuxK loss: the top `d_in // 2` pre-activations of dead latents
reconstruct the live latents' residual, scaled by min(dead / (d_in // 2), 1). Gated adds the L1 of the
ReLU'd gate pre-activations (scaled by decoder norms) and the auxiliary MSE of decoding them
(`detach_gated_decoder`: through a frozen decoder, as the paper defines it; SAELens lets it train the
decoder too). Matryoshka BatchTopK adds to BatchTopK's loss the MSE of every inner prefix of the latents
(the first `w` latents decoded alone, for each width but the last).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from .core import BATCH_TOPK, Dictionary, scatter


@dataclass(frozen=True)
class LossConfig:
    """The coefficients of the sparsity and auxiliary terms (static inside the compiled step)."""

    l1_coefficient: float = 5.0  # standard
    lp_norm: float = 1.0  # standard: the p of the sparsity norm
    l0_coefficient: float = 1.0  # jumprelu
    bandwidth: float = 0.05  # jumprelu: width of the straight-through rectangle
    aux_coefficient: float = 1.0  # topk, batchtopk: the AuxK dead-latent loss
    detach_gated_decoder: bool = False  # gated: the auxiliary reconstruction leaves the decoder untrained


def _rectangle(x: jax.Array) -> jax.Array:
    return ((x > -0.5) & (x < 0.5)).astype(x.dtype)


def _sum_to(grad: jax.Array, shape: tuple) -> jax.Array:
    """A broadcast cotangent summed back to `shape` (the threshold's [d_sae])."""
    return grad.reshape(-1, *shape).sum(0) if grad.shape != shape else grad


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def jumprelu(x: jax.Array, threshold: jax.Array, bandwidth: float) -> jax.Array:
    """x where x > threshold, else 0; the threshold learns through a rectangle-kernel straight-through estimate."""
    return x * (x > threshold)


def _jumprelu_fwd(x, threshold, bandwidth):
    return jumprelu(x, threshold, bandwidth), (x, threshold)


def _jumprelu_bwd(bandwidth, saved, g):
    x, threshold = saved
    d_thr = -(threshold / bandwidth) * _rectangle((x - threshold) / bandwidth) * g
    return (x > threshold) * g, _sum_to(d_thr, threshold.shape)


jumprelu.defvjp(_jumprelu_fwd, _jumprelu_bwd)


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def step(x: jax.Array, threshold: jax.Array, bandwidth: float) -> jax.Array:
    """1 where x > threshold, else 0; the gradient reaches the threshold only (straight-through)."""
    return (x > threshold).astype(x.dtype)


def _step_fwd(x, threshold, bandwidth):
    return step(x, threshold, bandwidth), (x, threshold)


def _step_bwd(bandwidth, saved, g):
    x, threshold = saved
    d_thr = -(1.0 / bandwidth) * _rectangle((x - threshold) / bandwidth) * g
    return jnp.zeros_like(x), _sum_to(d_thr, threshold.shape)


step.defvjp(_step_fwd, _step_bwd)


def batch_topk(pre: jax.Array, k: int) -> jax.Array:
    """BatchTopK: of all ReLU'd pre-activations of the batch [tokens, d_sae], keep the k * tokens largest."""
    acts = jax.nn.relu(pre)
    flat = acts.reshape(-1)
    values, indices = jax.lax.top_k(flat, k * (flat.shape[0] // pre.shape[-1]))
    return scatter(values, indices, flat.shape[0]).reshape(acts.shape)


def train_latents(d: Dictionary, pre: jax.Array, cfg: LossConfig) -> jax.Array:
    """Latents during training: BatchTopK over the batch, JumpReLU with its straight-through threshold."""
    arch = d.spec.architecture
    if arch in BATCH_TOPK:
        return batch_topk(pre, d.spec.k)
    if arch == "jumprelu":
        return jumprelu(pre, jax.nn.relu(d.threshold), cfg.bandwidth)
    return d.activate(pre)


def auxk_loss(d: Dictionary, residual: jax.Array, pre: jax.Array, dead: jax.Array) -> jax.Array:
    """AuxK: the top d_in // 2 dead pre-activations decode (without b_dec) the detached residual [tokens, d_out]
    (a crosscoder's: half of one model's width, d_in // (2 * blocks))."""
    k_aux = d.spec.d_in // (2 * d.spec.blocks)
    dead_count = dead.sum()
    values, indices = jax.lax.top_k(jnp.where(dead, pre, -jnp.inf), min(k_aux, d.spec.d_sae))
    values = jnp.where(jnp.isfinite(values), values, 0.0)  # fewer dead latents than k_aux: the rest add nothing
    if d.spec.rescale_acts_by_decoder_norm:
        values = values / d.decoder_norms()[indices]
    error = jnp.einsum("...k,...kd->...d", values, d.W_dec[indices]) - jax.lax.stop_gradient(residual)
    scale = jnp.minimum(dead_count / k_aux, 1.0)
    return jnp.where(dead_count > 0, scale * jnp.mean(jnp.sum(error**2, axis=-1)), 0.0)


def topk_codes(d: Dictionary, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """TopK (values, indices): the k largest pre-activations per token, chosen without gradient.

    The values are read from the dense pre-activations TopK ranks anyway, so their gradient is one dense
    [tokens, d_sae] scatter and one matmul with x. Gathering the k encoder columns instead (a [tokens, k, d_in]
    gather of W_enc's transpose, a scatter back) does less arithmetic but measured slower on CPU
    (bench/sae_profile.py).
    """
    pre = d.hidden_pre(x)
    _, indices = jax.lax.top_k(jax.lax.stop_gradient(pre), d.spec.k)
    return jax.nn.relu(jnp.take_along_axis(pre, indices, axis=-1)), indices


def prefix_outputs(d: Dictionary, latents: jax.Array, x: jax.Array | None = None) -> list[jax.Array]:
    """The outputs of each Matryoshka prefix: latents [..., :w] decoded alone, for every width w (the last: all)."""
    if d.spec.rescale_acts_by_decoder_norm:
        latents = latents / d.decoder_norms()
    out, start, outputs = d.b_dec + d._skip(x), 0, []
    for width in d.spec.matryoshka_widths:
        out = out + latents[..., start:width] @ d.W_dec[start:width]
        outputs.append(out)
        start = width
    return outputs


def gated_terms(d: Dictionary, x: jax.Array, target: jax.Array, coefficient: jax.Array,
                cfg: LossConfig) -> dict[str, jax.Array]:
    """Gated's L1 of the ReLU'd gate pre-activations and the auxiliary MSE of decoding them."""
    gate = jax.nn.relu(d.gate_pre(x))
    l1 = cfg.l1_coefficient * coefficient * jnp.mean(jnp.sum(gate * d.decoder_norms(), axis=-1))
    frozen = jax.lax.stop_gradient(d) if cfg.detach_gated_decoder else d
    via_gate = frozen.decode(gate, x)
    return {"l1_loss": l1, "auxiliary_reconstruction_loss": jnp.mean(jnp.sum((via_gate - target) ** 2, axis=-1))}


def _fired(latents: jax.Array) -> jax.Array:
    return jnp.any(latents != 0, axis=tuple(range(latents.ndim - 1)))


def loss(d: Dictionary, x: jax.Array, target: jax.Array, coefficient: jax.Array, dead: jax.Array | None,
         cfg: LossConfig) -> tuple[jax.Array, dict[str, Any]]:
    """(total loss, terms) of one dictionary on x [tokens, d_in]; terms: mse_loss, the sparsity or aux term,
    `l0` (mean active latents per token), `fired` [d_sae] (latents active on some token), `output`, and for
    BatchTopK `min_positive` (the smallest active latent, what its threshold follows).

    `target` is x for an SAE, the other activation for a transcoder; `coefficient` is the (warmed-up)
    sparsity coefficient multiplier in [0, 1]; `dead` [d_sae] marks latents past the dead-latent window
    (None: none are, and the AuxK term is not computed). TopK decodes its codes by gathering k decoder rows.
    """
    arch = d.spec.architecture
    extra: dict[str, Any] = {}
    if arch == "topk":
        values, indices = topk_codes(d, x)
        out = d.decode_sparse(values, indices, x)
        fired = jnp.zeros(d.spec.d_sae, bool).at[indices.reshape(-1)].max(values.reshape(-1) > 0)
        l0 = jnp.mean(jnp.sum(values > 0, axis=-1))
    else:
        pre = d.hidden_pre(x)
        latents = d.encode(x) if arch == "gated" else train_latents(d, pre, cfg)
        if arch == "matryoshka_batchtopk":
            *inner, out = prefix_outputs(d, latents, x)
            extra.update({f"inner_mse_loss_{w}": jnp.mean(jnp.sum((o - target) ** 2, axis=-1))
                          for w, o in zip(d.spec.matryoshka_widths, inner)})
        else:
            out = d.decode(latents, x)
        fired, l0 = _fired(latents), jnp.mean(jnp.sum(latents != 0, axis=-1))
        if arch in BATCH_TOPK:
            extra["min_positive"] = jnp.min(jnp.where(latents > 0, latents, jnp.inf))
    mse = jnp.mean(jnp.sum((out - target) ** 2, axis=-1))
    inner_terms = {k: extra.pop(k) for k in list(extra) if k.startswith("inner_mse_loss_")}
    if arch == "gated":
        terms = gated_terms(d, x, target, coefficient, cfg)
    elif arch == "standard":
        weighted = latents * d.decoder_norms()
        sparsity = jnp.sum(jnp.abs(weighted) ** cfg.lp_norm, axis=-1) ** (1.0 / cfg.lp_norm)
        terms = {"l1_loss": cfg.l1_coefficient * coefficient * jnp.mean(sparsity)}
    elif arch == "jumprelu":
        l0_term = jnp.sum(step(pre, jax.nn.relu(d.threshold), cfg.bandwidth), axis=-1)
        terms = {"l0_loss": cfg.l0_coefficient * coefficient * jnp.mean(l0_term)}
    elif dead is None:
        terms = {"auxiliary_reconstruction_loss": jnp.zeros((), mse.dtype)}
    else:
        aux = auxk_loss(d, target - out, d.hidden_pre(x), dead)
        terms = {"auxiliary_reconstruction_loss": cfg.aux_coefficient * aux}
    terms.update(inner_terms)
    total = mse + sum(terms.values())
    return total, {"mse_loss": mse, **terms, "l0": l0, "fired": fired, "output": out, **extra}
