"""Per-head hook points that cost nothing unless used: each head's input (`hook_attn_in`) and write (`hook_result`).

Both values are [batch, pos, heads, d_model], `heads` times the residual stream, so the forward does not run on
them: it builds the value, hands it to its hook, and goes on the usual (fused) way when the hook hands back that
same value. Under `jit` an unread value is dead code, removed before compiling, so a forward that neither
captures nor patches them compiles to the program it was before. When a patch returns a new value, the
forward reads it instead: each head's queries, keys and values from its own copy of the input, or the
attention's output as the sum of the heads' writes plus the output bias.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..equinox.layers import Dense

Array = jax.Array

__all__ = ["attention_input", "attention_output", "project_qkv"]


def attention_input(block: Any, x: Array) -> Array:
    """The normalized input of the block's attention: ln1(x) [b, s, d_model], or per head [b, s, heads, d_model]
    when `hook_attn_in` (the residual stream entering the attention, one copy per query head) was patched."""
    copies = jnp.broadcast_to(x[:, :, None, :], (*x.shape[:2], block.attn.query.kernel.shape[1], x.shape[-1]))
    given = block.hook_attn_in(copies)
    return block.ln1(x if given is copies else given)


def _per_head(dense: Dense, x: Array) -> Array:
    """dense applied to each head's own input x [b, s, heads, d_model]; key/value heads repeated to `heads`."""
    groups = x.shape[-2] // dense.kernel.shape[1]
    y = jnp.einsum("bshm,mhd->bshd", x, jnp.repeat(dense.kernel, groups, axis=1))
    return y if dense.bias is None else y + jnp.repeat(dense.bias, groups, axis=0)


def project_qkv(attn: Any, x: Array) -> tuple[Array, Array, Array]:
    """Queries, keys and values of x [b, s, d_model]; of a per-head input [b, s, heads, d_model], each head's
    from its own copy, with keys and values per query head (grouped heads ungrouped)."""
    if x.ndim == 3:
        return attn.hook_q(attn.query(x)), attn.hook_k(attn.key(x)), attn.hook_v(attn.value(x))
    return (attn.hook_q(_per_head(attn.query, x)), attn.hook_k(_per_head(attn.key, x)),
            attn.hook_v(_per_head(attn.value, x)))


def attention_output(attn: Any, z: Array) -> Array:
    """The attention's output from z [..., s, heads, d_head]: out(z), or, when `hook_result` (each head's write
    z_h . W_O[h], [..., s, heads, d_model]) was patched, the sum of the writes plus the output bias."""
    written = attn.out(z)
    result = jnp.einsum("...hd,hdm->...hm", z, attn.out.kernel)  # kernel [heads, d_head, d_model]
    given = attn.hook_result(result)
    if given is result:
        return written
    summed = given.sum(axis=-2)
    return summed if attn.out.bias is None else summed + attn.out.bias
