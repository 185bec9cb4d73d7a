"""Logit lens: each block's residual input projected through the trainer's final unembedding."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from ...capture import CaptureError
from .base import OpAnalysis, layer_output


def lens_scores(logits: jax.Array, final: jax.Array) -> dict[str, jax.Array]:
    """KL(final || lens) in nats, top-1 agreement with the final prediction, and the lens probability of it."""
    logp, final_logp = jax.nn.log_softmax(logits.astype(jnp.float32)), jax.nn.log_softmax(final.astype(jnp.float32))
    top = jnp.argmax(final, axis=-1)
    return {
        "kl": jnp.mean(jnp.sum(jnp.exp(final_logp) * (final_logp - logp), axis=-1)),
        "agreement": jnp.mean(jnp.argmax(logits, axis=-1) == top),
        "final_token_prob": jnp.mean(jnp.take_along_axis(jnp.exp(logp), top[..., None], axis=-1)),
    }


class LogitLens(OpAnalysis):
    """Per block (paths `blocks_*`, or `blocks/*` in NNX and Equinox, by default): how close its residual input,
    unembedded, is to the final prediction.

    Needs `trainer.unembed(params, resid)`. `position` picks the sequence position scored (default the last).
    """

    NAME = "logit_lens"
    DEFAULT_FILTER = ("blocks_*", "**/blocks_*", "blocks/*", "**/blocks/*")
    REQUIRED_PATHS = ("",)  # the root: its variables are the traced parameters the unembedding reads
    PARAMS: ClassVar[Mapping[str, Any]] = {"position": -1}

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, dict[str, jax.Array]]:
        """Scores of each block's input stream and of the last block's output (the final residual)."""
        triples = self.by_path(layers, inputs)
        root = [layer for path, layer, _ in triples if path == ""]
        blocks = [(path, layer, x) for path, layer, x in triples if path != ""]
        if not root or not blocks:
            raise CaptureError("logit_lens needs the root module and at least one block selected")
        params = self.params_of(root[0])
        position = int(self.params["position"])

        def unembed(resid: jax.Array) -> jax.Array:
            return self.unembed(params, resid)[..., position, :]

        streams = [(f"{path} (input)", x.args_kwargs()[0][0]) for path, _, x in blocks]
        last_path, last_layer, last_inputs = blocks[-1]
        streams.append((f"{last_path} (output)", layer_output(last_layer, last_inputs)))
        final = unembed(streams[-1][1])
        return {label: lens_scores(unembed(resid), final) for label, resid in streams}

    def plot(self, results: dict[str, dict[str, np.ndarray]]) -> Any:
        """KL to the final prediction and top-1 agreement across depth."""
        labels, position, tokens = list(results), int(self.params["position"]), self.prompt_tokens() or []
        scored = f" ('{tokens[position]}' in example 0)" if -len(tokens) <= position < len(tokens) else ""
        return self.line(None, {"KL to final (nats)": [float(results[k]["kl"]) for k in labels],
                                "top-1 agreement": [float(results[k]["agreement"]) for k in labels]},
                         title=f"Logit lens at {self.node}, position {position}{scored}",
                         xlabel="stream: " + ", ".join(labels), ylabel="value")
