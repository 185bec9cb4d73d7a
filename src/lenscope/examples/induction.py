"""`induction/train`: induction heads forming on real text (Olsson et al. 2022), a 2-layer model and a 1-layer control.

A GPT-2-family decoder is trained from scratch on the interpreter's standard-library sources (`lm/train` with
`model/family`); its tandem analyses (`induction_analyses`) record the in-context-learning score, the loss by
position, the loss on repeated random tokens, and each head's prefix-matching and previous-token scores at every
validation. After the main model, the same job trains the control (`induction/control_layers` blocks, default 1)
on its own lineage; each run records `induction/role`, and the main run's last node names the control's.
See docs/induction.md.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import Literal

from ..config import field
from ..errors import ConfigError
from ..job_registry import job
from ..store import Node
from .lm import LmConfig, LmTrainer

__all__ = ["InductionAnalysisConfig", "InductionConfig", "InductionTrainer"]

@dataclass
class InductionAnalysisConfig:
    """What the induction analyses read: how many text rows and repeated random-token rows, and the repeat length."""

    text_rows: int = field("analysis/text_rows", default=512, ge=1,
                           help="validation rows the loss by position and the in-context-learning score average")
    repeat_rows: int = field("analysis/repeat_rows", default=64, ge=1,
                             help="sequences of repeated random tokens the repeated-half loss and head scores average")
    repeat_len: int = field("analysis/repeat_len", default=64, ge=2,
                            help="random tokens repeated once in each sequence (2 x this <= data/seq_len)")
    ablate_heads: int = field("analysis/ablate_heads", default=1, ge=1,
                              help="heads zeroed together by induction/ablate: the top induction heads, and as many "
                                   "heads neither score marks")
    patch_rows: int = field("analysis/patch_rows", default=8, ge=1,
                            help="repeated-token sequences induction/patch patches each head at each position on")


@dataclass
class InductionConfig(LmConfig, InductionAnalysisConfig):
    """lm/train from scratch with the study's defaults (docs/induction.md says where they come from)."""

    control_layers: int = field("induction/control_layers", default=1, ge=0,
                                help="blocks of the control model trained after the main one; 0: no control")
    family: Literal["gpt2", "gpt_neox", "llama"] | None = field("model/family", default="gpt_neox",
                                                    help="the decoder family trained from scratch")
    text: str | None = field("data/text", default="stdlib",
                             help="'stdlib' (this interpreter's standard-library sources) or local text files")
    n_layers: int = field("model/n_layers", default=2, ge=1, help="blocks of the main model")
    d_model: int = field("model/d_model", default=64, ge=1, help="residual stream width")
    n_heads: int = field("model/n_heads", default=2, ge=1, help="attention heads per block")
    d_mlp: int = field("model/d_mlp", default=256, ge=0, help="MLP hidden width; 0: 4 x d_model")
    vocab_size: int = field("data/vocab_size", default=512, ge=258, help="tokens of the BPE trained on the corpus")
    seq_len: int = field("data/seq_len", default=128, gt=0, help="tokens per row (the context)")
    validation_fraction: float = field("data/validation_fraction", default=0.05, ge=0, lt=1,
                                       help="documents held out for validation, by a hash of their names")
    repeat_fraction: float = field("data/repeat_fraction", default=1.0, ge=0, le=1,
                                   help="share of training rows carrying a repeated span (the study's corpus variant)")
    repeat_mode: Literal["span", "half", "random"] = field(
        "data/repeat_mode", default="random",
        help="random: a span of random ids and its repeat at a random point of real text (docs/induction.md)")
    steps: int = field("training/steps", default=12000)
    batch_size: int = field("training/batch_size", default=16)
    lr: float = field("optimization/lr", default=3e-3)
    warmup_steps: int = field("optimization/warmup_steps", default=100)
    schedule: Literal["constant", "cosine"] = field("optimization/schedule", default="constant")
    clip: float = field("optimization/clip", default=1.0, ge=0)
    weight_decay: float = field("optimization/weight_decay", default=0.1)
    b2: float = field("optimization/b2", default=0.99)
    validation_interval: int = field("logging/validation_interval", default=250)
    checkpoint_interval: int = field("logging/checkpoint_interval", default=2000)
    eval_batches: int = field("logging/eval_batches", default=8)
    headline: list[str] = field("logging/headline", default=[
        "train/loss", "val/loss", "analysis/induction_heads/prefix_max", "analysis/repeated_tokens/repeated_half",
        "analysis/position_loss/icl_score"])

    def __post_init__(self) -> None:
        """Refuse repeated sequences longer than a row when the config is built, before anything is written."""
        super().__post_init__()
        if 2 * self.repeat_len > self.seq_len:
            raise ConfigError(f"analysis/repeat_len={self.repeat_len}: a sequence of 2 x {self.repeat_len} + 1 tokens "
                              f"exceeds a row of data/seq_len + 1 = {self.seq_len + 1}; give analysis/repeat_len <= "
                              f"{self.seq_len // 2} or a longer data/seq_len")


@job("induction/train")
class InductionTrainer(LmTrainer):
    """lm/train on the standard library with the induction analyses in tandem, then the control model."""

    CONFIG = InductionConfig

    def run(self) -> None:
        """Train this model; then, unless this is the control, train the control on a lineage of its own."""
        super().run()
        if self.args.control_layers == 0:
            return
        self.lineage.record({"induction/role": "main"})
        control = self.control_node()
        self.also_trained.append(control)
        self.lineage.record({"induction/control": str(control)})

    def control_node(self) -> Node:
        """Train the control (this config with `induction/control_layers` blocks) to its end; its final node."""
        args = dataclasses.replace(self.args, n_layers=self.args.control_layers, control_layers=0)
        control = type(self)(args, store=self.store)
        try:
            control.setup()
            print(f"lenscope: {self.node} trained; now the {args.n_layers}-layer control", file=sys.stderr,
                  flush=True)
            control.run()
            control.lineage.record({"induction/role": "control", "induction/main": str(self.node)})
        except BaseException as err:
            control.finish(err)
            raise
        else:
            control.finish()
        finally:
            control.cleanup()
        return control.node
