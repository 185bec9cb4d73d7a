"""DecoderConfig: every option of the one architecture-generic decoder, filled from a checkpoint's config.json."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

__all__ = ["DecoderConfig"]

Norm = Literal["layernorm", "rmsnorm"]
Activation = Literal["gelu", "gelu_tanh", "silu", "relu"]


@dataclass(frozen=True)
class DecoderConfig:
    """The computation of a decoder-only transformer, independent of which family's checkpoint it came from.

    `rope_freqs` holds one tuple of inverse frequencies per layer (None: learned positions), so per-layer
    rotary bases (Gemma 3's local and global layers) and scaled rotary (Llama 3) are data, not code paths.
    `windows` holds one sliding-window length per layer (None: full causal attention).
    """

    family: str
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_mlp: int
    norm: Norm = "rmsnorm"
    norm_eps: float = 1e-6
    norm_offset: bool = False          # Gemma: scale by (1 + weight)
    n_positions: int | None = None     # learned absolute positions (GPT-2)
    rope_freqs: tuple[tuple[float, ...], ...] | None = None
    rope_dim: int = 0                  # leading dims of each head that rotate (GPT-NeoX: a fraction)
    parallel: bool = False             # GPT-NeoX: x + attn(ln1 x) + mlp(ln2 x)
    gated: bool = True                 # act(gate x) * (up x), else act(fc_in x)
    activation: Activation = "silu"
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False              # Qwen 3, Gemma 3: RMSNorm over d_head of q and k
    post_norms: bool = False           # Gemma 2/3: a norm after attention and after the MLP too
    attn_scale: float = 1.0
    attn_softcap: float | None = None
    final_softcap: float | None = None
    windows: tuple[int | None, ...] | None = None
    embed_scale: float | None = None   # Gemma: embeddings times sqrt(d_model)
    tied: bool = False                 # the unembedding is the embedding's transpose
    final_norm: bool = True

    # -- TransformerLens' names (HookedTransformerConfig) for the same facts ----------------
    @property
    def d_vocab(self) -> int:
        """TransformerLens' name of `vocab_size`."""
        return self.vocab_size

    @property
    def n_key_value_heads(self) -> int:
        """TransformerLens' name of `n_kv_heads`."""
        return self.n_kv_heads

    @property
    def eps(self) -> float:
        """TransformerLens' name of `norm_eps`."""
        return self.norm_eps

    @property
    def act_fn(self) -> str:
        """TransformerLens' activation name: gelu_new (the tanh GELU), gelu, silu or relu."""
        return {"gelu_tanh": "gelu_new"}.get(self.activation, self.activation)

    @property
    def normalization_type(self) -> str:
        """TransformerLens' `LN` or `RMS`."""
        return "LN" if self.norm == "layernorm" else "RMS"

    @property
    def positional_embedding_type(self) -> str:
        """TransformerLens' `standard` (learned positions) or `rotary`."""
        return "rotary" if self.rope_freqs is not None else "standard"

    @property
    def rotary_dim(self) -> int | None:
        """TransformerLens' name of `rope_dim` (None with learned positions)."""
        return self.rope_dim if self.rope_freqs is not None else None

    @property
    def gated_mlp(self) -> bool:
        """TransformerLens' name of `gated`."""
        return self.gated

    @property
    def parallel_attn_mlp(self) -> bool:
        """TransformerLens' name of `parallel`."""
        return self.parallel

    def window(self, layer: int) -> int | None:
        """The sliding-window length of one layer (None: full causal)."""
        return None if self.windows is None else self.windows[layer]

    def freqs(self, layer: int) -> tuple[float, ...] | None:
        """The rotary inverse frequencies of one layer (None: learned positions)."""
        return None if self.rope_freqs is None else self.rope_freqs[layer]

    def replace(self, **changes: object) -> DecoderConfig:
        """A copy with some options changed."""
        return replace(self, **changes)
