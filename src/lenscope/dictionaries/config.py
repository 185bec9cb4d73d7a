"""The configuration of a dictionary-training job (`sae/...` paths beside the trainer's standard ones)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..config import field
from ..training import TrainerConfig


@dataclass
class SaeConfig(TrainerConfig):
    """What to train on (a model node's activations at some sites), which dictionary, and SAELens' knobs."""

    source: str | None = field("sae/source", default=None,
                               help="the model node the dictionary explains (set by --base MODEL_NODE)")
    model_job: str | None = field("sae/model_job", default=None,
                                  help="the model's job; null: the one whose node name the source node has")
    sites: list[str] = field("sae/sites", default=["blocks_0/mlp"],
                             help="where the dictionary reads: 'path' (a module's output) or 'path:arg' (its "
                                  "argument); several sites train one dictionary each, vmapped in one program")
    targets: list[str] | None = field("sae/targets", default=None,
                                      help="transcoders: the site each one predicts (the output of the module whose "
                                           "argument it reads); null: SAEs reconstructing their sites")
    positions: list[int] | None = field("sae/positions", default=None,
                                        help="sequence positions kept (one row per token); null: all")
    split: str = field("sae/split", default="train", help="the model's split whose activations train the dictionary")
    architecture: Literal["standard", "topk", "batchtopk", "jumprelu", "gated", "matryoshka_batchtopk"] = field(
        "sae/architecture", default="topk",
        help="standard (ReLU + L1), topk, batchtopk, jumprelu, gated or matryoshka_batchtopk")
    expansion: int = field("sae/expansion", default=16, ge=1, help="latents per input dimension (d_sae = this * d_in)")
    d_sae: int | None = field("sae/d_sae", default=None, ge=1,
                              help="latents of each dictionary (SAELens' d_sae); null: sae/expansion * d_in")
    k: int = field("sae/k", default=32, ge=1, help="topk/batchtopk: active latents per token")
    matryoshka_widths: list[int] | None = field(
        "sae/matryoshka_widths", default=None,
        help="matryoshka_batchtopk: nested prefix widths in latents (d_sae is appended when missing)")
    detach_gated_decoder: bool = field("sae/detach_gated_decoder", default=False,
                                       help="gated: the auxiliary reconstruction through a frozen decoder (the "
                                            "paper's); false: it trains the decoder too (SAELens')")
    skip: bool = field("sae/skip", default=False, help="transcoders: a learned linear skip connection")
    rescale: bool = field("sae/rescale_acts_by_decoder_norm", default=True,
                          help="topk/batchtopk: rank pre-activations times decoder norms (folded when saved)")
    normalize: Literal["none", "expected_average_only_in"] = field(
        "sae/normalize_activations", default="expected_average_only_in",
        help="scale inputs (and targets) to mean norm sqrt(d) during training; folded into the saved weights")
    l1_coefficient: float = field("sae/l1_coefficient", default=5.0, ge=0, help="standard, gated: L1 penalty")
    l0_coefficient: float = field("sae/l0_coefficient", default=1.0, ge=0, help="jumprelu: L0 penalty")
    coefficient_warmup: int = field("sae/coefficient_warmup_steps", default=0, ge=0,
                                    help="steps over which the L1/L0 coefficient rises linearly from 0")
    bandwidth: float = field("sae/bandwidth", default=0.05, gt=0, help="jumprelu: straight-through kernel width")
    init_threshold: float = field("sae/init_threshold", default=0.01, ge=0, help="jumprelu: initial threshold")
    aux_coefficient: float = field("sae/aux_coefficient", default=1.0, ge=0, help="topk/batchtopk: AuxK loss weight")
    threshold_lr: float = field("sae/topk_threshold_lr", default=0.01, gt=0, le=1,
                                help="batchtopk: EMA rate of the inference threshold")
    dead_window: int = field("sae/dead_window", default=1000, ge=1,
                             help="a latent not fired for more than this many steps is dead (AuxK trains it)")
    decoder_init_norm: float = field("sae/decoder_init_norm", default=0.1, gt=0, help="initial decoder-row norm")
    dense: float = field("sae/dense_density", default=0.1, gt=0, le=1,
                         help="a latent firing on more than this fraction of tokens counts as dense")
    eval_spliced: bool = field("sae/eval_spliced", default=True,
                               help="at validation, the model's loss with the dictionary spliced in (ce_loss_score)")
    dashboards: int = field("sae/dashboards", default=32, ge=0,
                            help="feature dashboards of the N most often firing latents of each layer, stored on the "
                                 "last node as features.parquet (layer 0) and features_L.parquet; 0: none")
    decay_steps: int = field("optimization/decay_steps", default=0, ge=0, help="final steps of linear decay to 0")
    grad_clip: float = field("optimization/grad_clip", default=1.0, ge=0, help="global gradient-norm clip; 0: none")
    # Refined trainer defaults (help text is inherited from TrainerConfig).
    steps: int = field("training/steps", default=2000)
    batch_size: int = field("training/batch_size", default=4096)
    lr: float = field("optimization/lr", default=3e-4)
    validation_interval: int = field("logging/validation_interval", default=500)
    checkpoint_interval: int = field("logging/checkpoint_interval", default=500)


@dataclass
class CrosscoderConfig(SaeConfig):
    """A crosscoder over checkpoints of one model lineage: `--base` a run, `crosscoder/steps` its checkpoints."""

    checkpoint_steps: str = field("crosscoder/steps", default="all",
                                  help="the checkpoints of the --base run's lineage the crosscoder reads: all, or a "
                                       "list of their steps, e.g. [1000,2000,4000]")
    architecture: Literal["standard", "topk", "batchtopk", "jumprelu", "gated", "matryoshka_batchtopk"] = field(
        "sae/architecture", default="standard",
        help="crosscoders: standard (ReLU; L1 penalty weighted by the sum of the checkpoints' decoder norms) or "
             "batchtopk (ranked by that sum)")
    expansion: int = field("sae/expansion", default=16, ge=1,
                           help="latents per dimension of one model's activation (d_sae = this * d, whatever the "
                                "number of checkpoints)")
    dashboards: int = field("sae/dashboards", default=32, ge=0,
                            help="feature dashboards of the N most often firing latents (their shared contexts, and "
                                 "per checkpoint their decoder-norm share and logit effects) on the last node; 0: none")
    eval_spliced: bool = field("sae/eval_spliced", default=False,
                               help="crosscoders have no spliced evaluation: false")
    # Sized to finish on the demo's run in a few minutes on 2 cores (docs/lineage.md gives the time); the larger
    # setting it documents, training/steps=2000 training/batch_size=4096, takes about ten times as long.
    steps: int = field("training/steps", default=500)
    batch_size: int = field("training/batch_size", default=1024)
    validation_interval: int = field("logging/validation_interval", default=250)
