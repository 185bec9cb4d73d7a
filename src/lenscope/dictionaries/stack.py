"""The trainer's model: one dictionary per site, stacked on a leading layer axis, as a linen module; and the
partition rules that shard its latents over the mesh's `model` axis."""

from __future__ import annotations

import re
from typing import Any

import flax.linen as nn
import jax

from ..errors import UsageError
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


def _not_initialized(key: Any, *shape: Any) -> Any:
    raise UsageError("a DictionaryStack's parameters come from SaeTrainer.init_params (SAELens' initialization), "
                     "not from model.init; bind it to them: stack.bind({'params': params})")


class DictionaryStack(nn.Module):
    """`layers` dictionaries of one Spec; called on [tokens, layers, d_in], returns [tokens, layers, d_out]."""

    spec: Spec
    layers: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """Every layer's reconstruction (or prediction) of its slice of x."""
        names = ["W_enc", "b_enc", "W_dec", "b_dec", "threshold"] + (["W_skip"] if self.spec.skip else [])
        names += ["b_mag", "r_mag"] if self.spec.architecture == "gated" else []
        stacked = Dictionary.of(self.spec, {n: self.param(n, _not_initialized) for n in names})
        return jax.vmap(lambda d, v: d(v), in_axes=(0, 1), out_axes=1)(stacked, x)


def unscale(d: Dictionary, in_scale: float, out_scale: float) -> Dictionary:
    """A dictionary trained on activations scaled by (in_scale, out_scale), as one for the unscaled activations.

    Decoder-norm ranking is folded first, so the result needs no flags (what SAELens saves).
    """
    if d.spec.rescale_acts_by_decoder_norm:
        d = d.fold_decoder_norms()
    out = d.replace(W_enc=d.W_enc * in_scale, W_dec=d.W_dec / out_scale, b_dec=d.b_dec / out_scale)
    if d.W_skip is not None:
        out = out.replace(W_skip=d.W_skip * (in_scale / out_scale))
    return out
