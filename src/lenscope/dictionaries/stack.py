"""The trainer's model: one dictionary per site, stacked on a leading layer axis, as a linen module."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax

from ..errors import UsageError
from .core import Dictionary, Spec


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
