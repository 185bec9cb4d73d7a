"""The induction study's analyses: loss by position (in-context-learning score), repeated random tokens, head scores.

Each records its numbers as values (`analysis/NAME/...`) and draws one figure (the flip-book over training). They
run in tandem with `induction/train`, which declares them in ANALYSIS, and standalone on a checkpoint
(`lenscope run induction/heads --base NODE`). Scores: `induction_scores`; definitions: docs/induction.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..analysis import AnalysisBase
from ..analysis.made_by import json_values
from ..job_registry import job
from ..models.pretrained import Decoder
from .induction import InductionConfig, InductionTrainer
from .induction_scores import (
    icl_windows,
    in_context_score,
    position_losses,
    prefix_matching,
    previous_token,
    repeated_halves,
    repeated_tokens,
)
from .lm_scratch import repeat_rows

__all__ = ["InductionHeads", "InductionView", "PositionLoss", "RepeatedTokens"]

ATTENTION = re.compile(r"blocks/\d+/attn")


class InductionView(AnalysisBase[InductionConfig, Decoder], InductionTrainer):
    """What the three share: the whole decoder (and its attention modules) captured, values recorded, one figure."""

    def select(self, paths: list[str]) -> list[str]:
        """The root (for the logits) and every block's attention, in block order."""
        return ["", *[p for p in paths if ATTENTION.fullmatch(p)]]

    def captured(self, layers: list[Any], inputs: list[Any]) -> tuple[jax.Array, jax.Array, list[jax.Array]]:
        """(tokens [b, s], loss by position [b, s - 1], each block's pattern [b, heads, q, k]) of the captured call."""
        root, *attention = zip(layers, inputs)
        tokens = root[1]["tokens"]
        losses = position_losses(root[1].call(root[0]), tokens)
        return tokens, losses, [x.call(layer, return_pattern=True)[1] for layer, x in attention]

    def values(self, results: Mapping[str, Any]) -> dict[str, Any]:
        """The scalars recorded as values `analysis/NAME/...`."""
        return {}

    def publish(self, results: Any) -> Any:
        """Record the values on the node, then save the figure."""
        if not self.is_writer:
            return None
        self.lineage.record(json_values(self.NAME, self.values(results)))
        return self.save_output(self.plot(results))

    @property
    def has_variant(self) -> bool:
        """Whether the training rows carry repeats (data/repeat_fraction on a model trained from scratch)."""
        return self.args.repeat_fraction > 0 and self.args.family is not None

    def text_rows(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The first `analysis/text_rows` validation rows, whole (inputs and the last target: data/seq_len + 1
        tokens, so every position's next token is in the row), the same rows at every step; and, when training
        rows carry repeats (data/repeat_fraction), those rows with the training variant applied (else None)."""
        a = self.args
        split = self.data.splits["validation"]
        rows = np.concatenate([split["inputs"], split["targets"][:, -1:]], axis=1)[: a.text_rows]
        if not self.has_variant:
            return rows, None
        tokens = self.tokenized
        name = "validation" if a.validation_fraction > 0 else "train"
        return rows, repeat_rows(rows, a.repeat_fraction, a.seed + 1, a.repeat_mode, tokens.streams[name],
                                 tokens.starts[name], tokens.tokenizer().get_vocab_size())

    def repeated_batch(self) -> dict[str, jax.Array]:
        """`analysis/repeat_rows` sequences of `analysis/repeat_len` random tokens repeated, fixed by the seed."""
        a = self.args
        vocab = self.pretrained.config.vocab_size
        return self.placement.place_batch({"inputs": repeated_tokens(a.repeat_rows, a.repeat_len, vocab, a.seed)})


@job("induction/position_loss")
class PositionLoss(InductionView):
    """Loss by position on validation text; the in-context-learning score (late loss minus early loss)."""

    NAME = "position_loss"

    def select(self, paths: list[str]) -> list[str]:
        """The root: the logits."""
        return [""]

    def analysis_batch(self) -> dict[str, jax.Array]:
        """The validation rows of `text_rows()`: the plain ones, then (when there are) those with the variant."""
        plain, variant = self.text_rows()
        return self.placement.place_batch({"inputs": plain if variant is None else np.concatenate([plain, variant])})

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, jax.Array]:
        """Mean loss at each position and the in-context-learning score (plain text; and on the variant's rows)."""
        losses = self.captured(layers, inputs)[1]
        plain = len(losses) // 2 if self.has_variant else len(losses)
        per_position = losses[:plain].mean(axis=0)
        out = {"loss": per_position, "icl_score": in_context_score(per_position)}
        if self.has_variant:
            variant = losses[plain:].mean(axis=0)
            out |= {"variant_loss": variant, "variant_icl_score": in_context_score(variant)}
        return out

    def values(self, results: Mapping[str, Any]) -> dict[str, Any]:
        """icl_score, the early and late windows' loss and the mean; the same under `variant/` for the variant."""
        out = _window_values(results["loss"], results["icl_score"])
        if "variant_loss" in results:
            out["variant"] = _window_values(results["variant_loss"], results["variant_icl_score"])
        return out

    def plot(self, results: Mapping[str, Any]) -> Any:
        """The loss against the position (plain text, and the training variant's rows), titled with the score."""
        curves = {"validation text": results["loss"]}
        if "variant_loss" in results:
            curves["with the training variant's repeats"] = results["variant_loss"]
        return self.line(None, curves, xlabel="token position", ylabel="loss (nats)",
                         title=f"Loss by position at {self.node} (ICL {float(results['icl_score']):+.3f})")


def _window_values(loss: Any, score: Any) -> dict[str, float]:
    """The in-context-learning score, the early and late windows' mean loss, and the mean over positions."""
    early, late = icl_windows(len(loss))
    return {"icl_score": float(score), "early": float(loss[early].mean()), "late": float(loss[late].mean()),
            "mean": float(loss.mean())}


@job("induction/repeated_tokens")
class RepeatedTokens(InductionView):
    """Loss by position on random tokens repeated once: copy 2 predicted from copy 1 is in-context learning."""

    NAME = "repeated_tokens"

    def select(self, paths: list[str]) -> list[str]:
        """The root: the logits."""
        return [""]

    def analysis_batch(self) -> dict[str, jax.Array]:
        """The repeated random tokens."""
        return self.repeated_batch()

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, jax.Array]:
        """Mean loss at each position, and on each copy's tokens 1..L-1."""
        losses = self.captured(layers, inputs)[1]
        first, second = repeated_halves(losses, self.args.repeat_len)
        return {"loss": losses.mean(axis=0), "first": first, "repeated": second}

    def values(self, results: Mapping[str, Any]) -> dict[str, Any]:
        """Loss on the first copy, on the repeated copy, and the advantage (first minus repeated)."""
        first, repeated = float(results["first"]), float(results["repeated"])
        return {"first_half": first, "repeated_half": repeated, "advantage": first - repeated}

    def plot(self, results: Mapping[str, Any]) -> Any:
        """The loss against the position: flat on copy 1, down on copy 2 once induction works."""
        return self.line(None, {"loss": results["loss"]}, xlabel="position t (predicting token t + 1; copy 2 "
                         f"starts at token {self.args.repeat_len + 1})", ylabel="loss (nats)",
                         title=f"Repeated random tokens at {self.node} (copy 2: {float(results['repeated']):.2f})")


@job("induction/heads")
class InductionHeads(InductionView):
    """Each head's prefix-matching (induction) score and previous-token score, on repeated random tokens."""

    NAME = "induction_heads"

    def analysis_batch(self) -> dict[str, jax.Array]:
        """The repeated random tokens."""
        return self.repeated_batch()

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, jax.Array]:
        """[blocks, heads] of both scores."""
        patterns = self.captured(layers, inputs)[2]
        return {"prefix": jnp.stack([prefix_matching(p, self.args.repeat_len) for p in patterns]),
                "previous": jnp.stack([previous_token(p) for p in patterns])}

    def values(self, results: Mapping[str, Any]) -> dict[str, Any]:
        """Each head's scores (`prefix/L0H1`, `previous/L0H1`), the largest of each and where it is."""
        prefix, previous = np.asarray(results["prefix"]), np.asarray(results["previous"])
        out: dict[str, Any] = {}
        for name, scores in (("prefix", prefix), ("previous", previous)):
            layer, head = np.unravel_index(int(scores.argmax()), scores.shape)
            out[f"{name}_max"] = float(scores.max())
            out[f"{name}_best"] = f"L{layer}H{head}"
            out[name] = {f"L{i}H{j}": float(scores[i, j]) for i in range(scores.shape[0])
                         for j in range(scores.shape[1])}
        return out

    def plot(self, results: Mapping[str, Any]) -> Any:
        """Two heatmaps, block by head: the prefix-matching and previous-token scores (one shared colour scale)."""
        prefix, previous = np.asarray(results["prefix"]), np.asarray(results["previous"])
        heads = [f"H{h}" for h in range(prefix.shape[1])]
        blocks = [f"L{b}" for b in range(prefix.shape[0])]
        return self.heatmaps([prefix, previous], titles=["prefix matching", "previous token"], xlabel="head",
                             ylabel="block", xticklabels=heads, yticklabels=blocks,
                             title=f"Head scores at {self.node}")


InductionTrainer.ANALYSIS = (PositionLoss, RepeatedTokens, InductionHeads)
