"""The trainer's model: one dictionary per site, stacked on a leading layer axis, as a linen module; and the
partition rules that shard its latents over the mesh's `model` axis."""

from __future__ import annotations

import re
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from ..training.rules import Rule, Rules
from .core import Dictionary, Spec

# The stack's parameters carry a leading layer axis: each dictionary's latents (d_sae) split over `model`,
# replicated over `data` (tokens are split over `data`). Best effort, as the built-in model rules: a mesh
# without `model`, or a size that does not divide d_sae, leaves that dimension replicated.
_LATENT_RULES = (
    (r"(^|/)W_enc$", (None, None, "model")),  # [layers, d_in, d_sae]
    (r"(^|/)W_dec$", (None, "model", None)),  # [layers, d_sae, d_out]
    (r"(^|/)(b_enc|threshold|b_mag|r_mag)$", (None, "model")),  # [layers, d_sae]
)
DICTIONARY_RULES = Rules(tuple(Rule(re.compile(regex), dims, f"built-in dictionary rule {regex!r}")
                               for regex, dims in _LATENT_RULES), strict=False)


def shapes(spec: Spec, layers: int) -> dict[str, tuple[int, ...]]:
    """Each parameter's shape in a stack of `layers` dictionaries of `spec` (SAELens' names)."""
    out = {"W_enc": (layers, spec.d_in, spec.d_sae), "b_enc": (layers, spec.d_sae),
           "W_dec": (layers, spec.d_sae, spec.d_out), "b_dec": (layers, spec.d_out), "threshold": (layers, spec.d_sae)}
    if spec.skip:
        out["W_skip"] = (layers, spec.d_in, spec.d_out)
    if spec.architecture == "gated":
        out.update(b_mag=(layers, spec.d_sae), r_mag=(layers, spec.d_sae))
    return out


class DictionaryStack(nn.Module):
    """`layers` dictionaries of one Spec; called on [tokens, layers, d_in], returns [tokens, layers, d_out].

    Its parameters come from SaeTrainer.init_params (SAELens' initialization); `init` gives zeros of their shapes
    (what Flax checks a bound module's parameters against).
    """

    spec: Spec
    layers: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """Every layer's reconstruction (or prediction) of its slice of x."""
        stacked = Dictionary.of(self.spec, {name: self.param(name, nn.initializers.zeros, shape, x.dtype)
                                            for name, shape in shapes(self.spec, self.layers).items()})
        return jax.vmap(lambda d, v: d(v), in_axes=(0, 1), out_axes=1)(stacked, x)


def unscale(d: Dictionary, in_scale: Any, out_scale: Any) -> Dictionary:
    """A dictionary trained on activations scaled by (in_scale, out_scale), as one for the unscaled activations.

    A scale is one number, or one per feature ([d_in], [d_out]: a crosscoder's, constant over each block).
    Decoder-norm ranking is folded first, so the result needs no flags (what SAELens saves).
    """
    if d.spec.rescale_acts_by_decoder_norm:
        d = d.fold_decoder_norms()
    rows = float(in_scale) if np.ndim(in_scale) == 0 else jnp.asarray(in_scale)[:, None]  # W_enc's rows
    out_scale = float(out_scale) if np.ndim(out_scale) == 0 else jnp.asarray(out_scale)
    out = d.replace(W_enc=d.W_enc * rows, W_dec=d.W_dec / out_scale, b_dec=d.b_dec / out_scale)
    if d.W_skip is not None:
        out = out.replace(W_skip=d.W_skip * (rows / out_scale))
    return out
