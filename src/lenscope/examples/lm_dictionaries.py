"""`lm/sae`, `lm/transcoder` and `lm/crosscoder`: sparse dictionaries on a language model's activations
(docs/dictionaries.md).

`--base` is the model's node (an `lm/train` checkpoint, the pretrained or the fine-tuned weights); the
dictionary's node (`lm.sae@...`, `lm.transcoder@...`) is its child, so the store answers which dictionaries
explain a checkpoint, and `compute_attribution_graph` takes an `lm/transcoder` node as its `transcoders`.
`lm/crosscoder` reads several checkpoints of one `lm/train` run (`crosscoder/steps`) and descends from each.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import field
from ..dictionaries import CrosscoderConfig, CrosscoderTrainer, SaeConfig, SaeTrainer
from ..job_registry import job

__all__ = ["LmCrosscoder", "LmCrosscoderConfig", "LmSae", "LmSaeConfig", "LmTranscoder", "LmTranscoderConfig"]


@dataclass
class LmSaeConfig(SaeConfig):
    """An SAE on the residual stream after block 0 by default."""

    sites: list[str] = field("sae/sites", default=["blocks.0.hook_resid_post"],
                             help="where the dictionary reads: a hook or module path (its output) or 'path:x' "
                                  "(its argument), e.g. blocks.1.hook_resid_post; one dictionary each")


@dataclass
class LmTranscoderConfig(SaeConfig):
    """A transcoder from block 0's MLP input (ln2's output) to its output by default."""

    sites: list[str] = field("sae/sites", default=["blocks.0.mlp:x"],
                             help="each transcoder's input: an MLP's argument, 'blocks.L.mlp:x' (ln2's output, "
                                  "the input attribution graphs read)")
    targets: list[str] | None = field("sae/targets", default=["blocks.0.mlp"],
                                      help="the output each transcoder predicts: that MLP's, 'blocks.L.mlp'")


@job("lm/sae")
class LmSae(SaeTrainer):
    """A TopK SAE on a language model's activations (`--base` the model's checkpoint node)."""

    CONFIG = LmSaeConfig


@job("lm/transcoder")
class LmTranscoder(SaeTrainer):
    """A TopK transcoder per MLP of a language model (`--base` the model's checkpoint node)."""

    CONFIG = LmTranscoderConfig


@dataclass
class LmCrosscoderConfig(LmSaeConfig, CrosscoderConfig):
    """A crosscoder on the residual stream after block 0 by default, over checkpoints of an `lm/train` run."""


@job("lm/crosscoder")
class LmCrosscoder(CrosscoderTrainer):
    """A crosscoder over checkpoints of a language model's run (`--base` the run, `crosscoder/steps` its steps)."""

    CONFIG = LmCrosscoderConfig
