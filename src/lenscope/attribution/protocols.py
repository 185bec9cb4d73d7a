"""What the attribution graph needs from a transcoder and from a model: two small Protocols (the seams)."""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax

Array = jax.Array


@runtime_checkable
class Transcoder(Protocol):
    """A per-layer transcoder: reads an MLP's input, writes (an approximation of) its output.

    `W_enc` is [d_in, d_features] and `W_dec` [d_features, d_out]; `encode` returns the sparse feature
    activations (its pre-activations must be `x @ W_enc` plus a constant), `decode` the reconstruction.
    """

    W_enc: Array
    W_dec: Array

    def encode(self, x: Array) -> Array: ...

    def decode(self, acts: Array) -> Array: ...


class Readout(NamedTuple):
    """What the frozen forward exposes to the graph: every MLP's input and the normalized final residual."""

    mlp_in: Array  # [n_layers, n_pos, d_model]
    final: Array | None  # [n_pos, d_model], the unembedding's input (None when asked for the first layers only)


class CleanPass(NamedTuple):
    """One ordinary forward on a prompt: the readouts, each MLP's true output, the logits and the frozen values."""

    readout: Readout
    mlp_out: Array  # [n_layers, n_pos, d_model]
    logits: Array  # [n_pos, n_out]
    frozen: Any  # a PyTree of the attention patterns and normalization scales (model-specific)


class ReplacementModel(Protocol):
    """A model seen as circuit-tracer's local replacement model: attention patterns, norm scales and MLP outputs
    frozen at their values on the prompt, so the readouts are affine in additive deltas at the embedding and at
    each MLP's output.

    Optional: `max_positions` (int, or None for no limit). A model that has it says it is causal (no real position
    sees a later one), so the Attributor pads its prompts on the right to shape buckets of at most that many
    positions (attribution/padding.py); a model without it runs every prompt at its exact length.

    Optional: `program_key` (str, or None). A model that has one says its programs depend on nothing but that
    key, lenscope's source and the arguments' shapes, so the Attributor saves them as executables for the next
    process (attribution/saved.py); None (or no such attribute) leaves them to JAX's persistent cache.
    """

    n_layers: int

    def clean(self, params: Any, tokens: Array) -> CleanPass:
        """The ordinary forward on tokens [n_pos], recording what the frozen forward holds fixed."""
        ...

    def frozen(self, params: Any, tokens: Array, frozen: Any, mlp_out: Array, embed_delta: Array,
               mlp_delta: Array, layers: int | None = None) -> Readout:
        """The forward with patterns and norm scales from `frozen`, MLP outputs `mlp_out + mlp_delta`, and
        `embed_delta` [n_pos, d_model] added to the token embeddings; with `layers`, only the first `layers` MLP
        inputs (`final` None), so that nothing above them is on the backward pass."""
        ...

    def intervened(self, params: Any, tokens: Array, mlp_delta: Array) -> Array:
        """The ordinary forward (nothing frozen) with `mlp_delta` [n_layers, n_pos, d_model] added to the MLP
        outputs; the logits [n_pos, n_out]."""
        ...

    def token_vectors(self, params: Any, tokens: Array) -> Array:
        """The token embeddings [n_pos, d_model] (the token nodes' vectors; positional embeddings excluded)."""
        ...

    def unembedding(self, params: Any) -> Array:
        """The unembedding matrix [d_model, n_out] (the logit nodes read its demeaned columns)."""
        ...
