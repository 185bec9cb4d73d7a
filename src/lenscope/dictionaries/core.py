"""A sparse dictionary (SAE or transcoder) as one PyTree: parameters, encode, decode, sparse codes.

Conventions follow SAELens' (so its files map one to one): `W_enc` [d_in, d_sae], `b_enc` [d_sae],
`W_dec` [d_sae, d_out], `b_dec` [d_out], `threshold` [d_sae] (JumpReLU and BatchTopK; zeros otherwise)
and, for a skip transcoder, `W_skip` [d_in, d_out] (the output adds `x @ W_skip`; SAELens stores its
transpose). A gated dictionary's `b_enc` is SAELens' `b_gate` (the gate path's bias) and it also holds the
magnitude path's `b_mag` and `r_mag` [d_sae] (magnitude weights `W_enc * exp(r_mag)`). An SAE
reconstructs its input (d_out = d_in, and by default subtracts `b_dec` from the input before encoding);
a transcoder predicts another activation from it (never subtracts `b_dec`). A crosscoder (Lindsey et al.
2024) is an SAE over `blocks` models' activations concatenated: its decoder row is one block per model, and
its decoder norm (what the L1 penalty and the decoder-norm ranking weigh) is the sum of the blocks' norms.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

import jax
import jax.numpy as jnp
from flax import struct

from ..errors import ConfigError, hint

Architecture = Literal["standard", "topk", "batchtopk", "jumprelu", "gated", "matryoshka_batchtopk"]
ARCHITECTURES: tuple[str, ...] = ("standard", "topk", "batchtopk", "jumprelu", "gated", "matryoshka_batchtopk")
BATCH_TOPK = ("batchtopk", "matryoshka_batchtopk")  # k on average over a batch; a JumpReLU at inference
PARAMS = ("W_enc", "b_enc", "W_dec", "b_dec", "threshold", "W_skip", "b_mag", "r_mag")


@jax.custom_vjp
def centered_matmul(x: jax.Array, b: jax.Array, w: jax.Array) -> jax.Array:
    """(x - b) @ w for one shared b [d]; its gradient for b is one vector-matrix product (summed over tokens
    first), where plain autodiff multiplies the whole [tokens, d_sae] gradient by w's transpose."""
    return (x - b) @ w


def _centered_fwd(x: jax.Array, b: jax.Array, w: jax.Array) -> tuple[jax.Array, tuple]:
    centered = x - b
    return centered @ w, (centered, w)


def _centered_bwd(res: tuple, g: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    centered, w = res
    rows = g.reshape(-1, g.shape[-1])
    dw = centered.reshape(-1, centered.shape[-1]).T @ rows
    return g @ w.T, -(rows.sum(0) @ w.T), dw  # the first, x's, is dropped by XLA where nothing reads it


centered_matmul.defvjp(_centered_fwd, _centered_bwd)


@dataclass(frozen=True)
class Spec:
    """What a dictionary computes (static: hashable, the same for every layer of a stack)."""

    architecture: str
    d_in: int
    d_sae: int
    d_out: int = 0  # 0: d_in
    k: int = 32  # active latents per token (topk) or on average over a batch (batchtopk)
    transcoder: bool = False
    skip: bool = False
    apply_b_dec_to_input: bool = True  # SAEs only: encode x - b_dec
    rescale_acts_by_decoder_norm: bool = False  # topk/batchtopk: rank pre-activations times decoder-row norms
    matryoshka_widths: tuple[int, ...] = ()  # matryoshka_batchtopk: the nested prefix widths, ending at d_sae
    blocks: int = 1  # a crosscoder: the models whose activations are concatenated in x (d_in and d_out split evenly)

    def __post_init__(self) -> None:
        """Refuse an unknown architecture or impossible sizes, naming the nearest valid choice."""
        if self.architecture not in ARCHITECTURES:
            raise ConfigError(f"dictionary architecture {self.architecture!r}{hint(self.architecture, ARCHITECTURES)}"
                              f"; expected one of {', '.join(ARCHITECTURES)}")
        for name in ("d_in", "d_sae", "k", "blocks"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"dictionary {name} must be a positive integer, got {getattr(self, name)!r}")
        if self.architecture in ("topk", *BATCH_TOPK) and self.k > self.d_sae:
            raise ConfigError(f"dictionary k={self.k} exceeds d_sae={self.d_sae}; choose k <= d_sae")
        if self.architecture == "matryoshka_batchtopk":
            object.__setattr__(self, "matryoshka_widths", _widths(self.matryoshka_widths, self.d_sae))
        elif self.matryoshka_widths:
            raise ConfigError(f"matryoshka_widths apply to matryoshka_batchtopk only, not {self.architecture!r}")
        if self.architecture == "gated" and self.rescale_acts_by_decoder_norm:
            raise ConfigError("a gated dictionary does not rank by decoder norm; "
                              "set rescale_acts_by_decoder_norm=False")
        if self.d_out == 0:
            object.__setattr__(self, "d_out", self.d_in)
        if self.transcoder:
            object.__setattr__(self, "apply_b_dec_to_input", False)
        elif self.d_out != self.d_in or self.skip:
            raise ConfigError(f"an SAE reconstructs its input (d_out = d_in = {self.d_in}, no skip); set "
                              f"transcoder=True for d_out={self.d_out} or a skip connection")
        if self.blocks > 1 and (self.transcoder or self.d_in % self.blocks):
            raise ConfigError(f"a crosscoder of {self.blocks} blocks reconstructs its input, split evenly: d_in="
                              f"{self.d_in} must be a multiple of {self.blocks}, and it cannot be a transcoder")

    def replace(self, **changes: Any) -> Spec:
        """A copy with some fields changed (checked again)."""
        return replace(self, **changes)


def _widths(widths: Any, d_sae: int) -> tuple[int, ...]:
    """Matryoshka prefix widths, strictly increasing and ending at d_sae (appended when missing, as SAELens does)."""
    out = tuple(int(w) for w in widths)
    if out and out[-1] < d_sae:
        out = (*out, d_sae)
    if not out or out[0] < 1 or out[-1] != d_sae or any(a >= b for a, b in zip(out, out[1:])):
        raise ConfigError(f"matryoshka_widths {list(widths)!r} must be positive, strictly increasing and at most "
                          f"d_sae={d_sae}, e.g. [{max(d_sae // 4, 1)}, {max(d_sae // 2, 1)}, {d_sae}]")
    return out


@struct.dataclass
class Dictionary:
    """One dictionary's arrays and its Spec; under `jax.vmap` a stack of them (leading layer axis)."""

    W_enc: jax.Array
    b_enc: jax.Array
    W_dec: jax.Array
    b_dec: jax.Array
    threshold: jax.Array
    W_skip: jax.Array | None = None
    spec: Spec = struct.field(pytree_node=False, default=None)
    b_mag: jax.Array | None = None  # gated: the magnitude path's bias
    r_mag: jax.Array | None = None  # gated: the magnitude path's log scale of each encoder column

    # -- construction --------------------------------------------------------------
    @classmethod
    def of(cls, spec: Spec, params: dict[str, Any]) -> Dictionary:
        """A Dictionary from a {name: array} mapping (what a trainer's state holds); `threshold` may be missing."""
        missing = [n for n in ("W_enc", "b_enc", "W_dec", "b_dec") if n not in params]
        if spec.skip and "W_skip" not in params:
            missing.append("W_skip")
        if spec.architecture == "gated":
            missing += [n for n in ("b_mag", "r_mag") if n not in params]
        if missing:
            raise ConfigError(f"dictionary parameters lack {', '.join(missing)}; have {', '.join(sorted(params))}")
        threshold = params.get("threshold")
        if threshold is None:
            threshold = jnp.zeros(jnp.shape(params["b_enc"]), jnp.result_type(params["b_enc"]))
        gated = spec.architecture == "gated"
        return cls(params["W_enc"], params["b_enc"], params["W_dec"], params["b_dec"], threshold,
                   params.get("W_skip") if spec.skip else None, spec,
                   params["b_mag"] if gated else None, params["r_mag"] if gated else None)

    @property
    def params(self) -> dict[str, jax.Array]:
        """The arrays by name (W_skip only for a skip transcoder)."""
        out = {"W_enc": self.W_enc, "b_enc": self.b_enc, "W_dec": self.W_dec, "b_dec": self.b_dec,
               "threshold": self.threshold}
        for name in ("W_skip", "b_mag", "r_mag"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    # -- encoding ------------------------------------------------------------------
    def _projected(self, x: jax.Array) -> jax.Array:
        """(x - b_dec) @ W_enc (x @ W_enc when b_dec is not applied to the input) [..., d_sae]."""
        if not self.spec.apply_b_dec_to_input:
            return x @ self.W_enc
        return centered_matmul(x, self.b_dec, self.W_enc) if self.b_dec.ndim == 1 else (x - self.b_dec) @ self.W_enc

    def hidden_pre(self, x: jax.Array) -> jax.Array:
        """Pre-activations [..., d_sae]: (x - b_dec) @ W_enc + b_enc, times decoder norms when the spec rescales.

        A gated dictionary's are its magnitude path's, `(x - b_dec) @ (W_enc * exp(r_mag)) + b_mag`.
        """
        z = self._projected(x)
        if self.spec.architecture == "gated":
            return z * jnp.exp(self.r_mag) + self.b_mag
        pre = z + self.b_enc
        if self.spec.rescale_acts_by_decoder_norm:
            pre = pre * self.decoder_norms()
        return pre

    def gate_pre(self, x: jax.Array) -> jax.Array:
        """A gated dictionary's gate pre-activations (x - b_dec) @ W_enc + b_gate [..., d_sae]."""
        return self._projected(x) + self.b_enc

    def decoder_norms(self) -> jax.Array:
        """The L2 norm of each decoder row [d_sae]; a crosscoder's: the sum of its blocks' norms."""
        if self.spec.blocks == 1:
            return jnp.linalg.norm(self.W_dec, axis=-1)
        return self.block_norms().sum(-1)

    def block_norms(self) -> jax.Array:
        """The L2 norm of each decoder row's part for each block (model) [d_sae, blocks]."""
        return jnp.linalg.norm(self.W_dec.reshape(*self.W_dec.shape[:-1], self.spec.blocks, -1), axis=-1)

    def activate(self, pre: jax.Array) -> jax.Array:
        """Latents from pre-activations, at inference (BatchTopK acts as the JumpReLU it is saved as)."""
        arch = self.spec.architecture
        if arch == "gated":
            raise ConfigError("a gated dictionary's latents need its gate pre-activations too: use encode(x)")
        if arch == "standard":
            return jax.nn.relu(pre)
        if arch == "topk":
            values, indices = jax.lax.top_k(pre, self.spec.k)
            return scatter(jax.nn.relu(values), indices, self.spec.d_sae)
        return jax.nn.relu(pre) * (pre > jax.nn.relu(self.threshold))

    def encode(self, x: jax.Array) -> jax.Array:
        """Latents [..., d_sae] of activations x [..., d_in]; gated: ReLU'd magnitudes where the gate is open."""
        if self.spec.architecture == "gated":
            z = self._projected(x)  # one matmul for both paths: exp(r_mag) scales W_enc's columns
            return (z + self.b_enc > 0) * jax.nn.relu(z * jnp.exp(self.r_mag) + self.b_mag)
        return self.activate(self.hidden_pre(x))

    def encode_sparse(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """A TopK code as (values [..., k], indices [..., k]): the k largest pre-activations, ReLU'd."""
        if self.spec.architecture != "topk":
            raise ConfigError(f"encode_sparse needs a topk dictionary (a fixed k per token), not "
                              f"{self.spec.architecture!r}; use encode()")
        values, indices = jax.lax.top_k(self.hidden_pre(x), self.spec.k)
        return jax.nn.relu(values), indices

    # -- decoding ------------------------------------------------------------------
    def decode(self, latents: jax.Array, x: jax.Array | None = None) -> jax.Array:
        """Output [..., d_out] of latents [..., d_sae]; a skip transcoder also needs its input x."""
        if self.spec.rescale_acts_by_decoder_norm:
            latents = latents / self.decoder_norms()
        return latents @ self.W_dec + self.b_dec + self._skip(x)

    def decode_sparse(self, values: jax.Array, indices: jax.Array, x: jax.Array | None = None) -> jax.Array:
        """decode() of a sparse code: gathers the k decoder rows instead of multiplying by d_sae mostly-zeros."""
        if self.spec.rescale_acts_by_decoder_norm:
            values = values / self.decoder_norms()[indices]
        rows = self.W_dec[indices]  # [..., k, d_out]
        return jnp.einsum("...k,...kd->...d", values, rows) + self.b_dec + self._skip(x)

    def _skip(self, x: jax.Array | None) -> jax.Array | float:
        if self.W_skip is None:
            return 0.0
        if x is None:
            raise ConfigError("a skip transcoder's decode needs its input: decode(latents, x)")
        return x @ self.W_skip

    def __call__(self, x: jax.Array) -> jax.Array:
        """The reconstruction (SAE) or prediction (transcoder) of x."""
        return self.decode(self.encode(x), x)

    def fold_decoder_norms(self) -> Dictionary:
        """The same function with unit-norm decoder rows (norms moved into W_enc, b_enc, threshold), no rescaling.

        What SAELens does before saving a dictionary that ranks by decoder norm, so its file needs no flag.
        """
        norms = jnp.maximum(self.decoder_norms(), 1e-8)
        folded = self.replace(W_enc=self.W_enc * norms, b_enc=self.b_enc * norms, W_dec=self.W_dec / norms[:, None])
        if not self.spec.rescale_acts_by_decoder_norm:  # JumpReLU: the threshold scales with the pre-activation
            folded = folded.replace(threshold=self.threshold * norms)
        if self.b_mag is not None:  # gated: r_mag needs nothing, W_enc's columns carry the norms
            folded = folded.replace(b_mag=self.b_mag * norms)
        return folded.replace(spec=self.spec.replace(rescale_acts_by_decoder_norm=False))


def scatter(values: jax.Array, indices: jax.Array, size: int) -> jax.Array:
    """A dense [..., size] array holding `values` at `indices` along the last axis, zeros elsewhere."""
    zeros = jnp.zeros((*values.shape[:-1], size), values.dtype)
    return jnp.put_along_axis(zeros, indices, values, axis=-1, inplace=False)


def init_params(key: jax.Array, spec: Spec, *, decoder_init_norm: float | None = 0.1,
                init_threshold: float = 0.0, dtype: Any = jnp.float32) -> dict[str, jax.Array]:
    """Fresh parameters as SAELens initializes them: Kaiming-uniform decoder rows scaled to `decoder_init_norm`,
    the encoder its transpose (an SAE) or drawn alike (a transcoder), zero biases, skip and gated r_mag.

    A crosscoder's decoder rows are scaled block by block, each block to `decoder_init_norm`, so every model
    starts with an equal share of every latent.
    """
    dec_key, enc_key = jax.random.split(key)
    bound = (6.0 / spec.d_out) ** 0.5  # torch's kaiming_uniform_ on [d_sae, d_out]: fan_in = d_out, gain sqrt(2)
    W_dec = jax.random.uniform(dec_key, (spec.d_sae, spec.d_out), dtype, -bound, bound)
    if decoder_init_norm is not None:
        blocks = W_dec.reshape(spec.d_sae, spec.blocks, -1)
        W_dec = (blocks / jnp.linalg.norm(blocks, axis=-1, keepdims=True) * decoder_init_norm).reshape(W_dec.shape)
    if spec.transcoder:
        enc_bound = (6.0 / spec.d_sae) ** 0.5
        W_enc = jax.random.uniform(enc_key, (spec.d_in, spec.d_sae), dtype, -enc_bound, enc_bound)
        if decoder_init_norm is not None:
            W_enc = W_enc / jnp.linalg.norm(W_enc, axis=0, keepdims=True) * decoder_init_norm
    else:
        W_enc = W_dec.T
    params = {"W_enc": W_enc, "b_enc": jnp.zeros(spec.d_sae, dtype), "W_dec": W_dec,
              "b_dec": jnp.zeros(spec.d_out, dtype), "threshold": jnp.full(spec.d_sae, init_threshold, dtype)}
    if spec.skip:
        params["W_skip"] = jnp.zeros((spec.d_in, spec.d_out), dtype)
    if spec.architecture == "gated":
        params.update(b_mag=jnp.zeros(spec.d_sae, dtype), r_mag=jnp.zeros(spec.d_sae, dtype))
    return params
