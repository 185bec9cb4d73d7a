"""The configuration every trainer has (DESIGN T6); job configs inherit from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import check_ranges, field

INTERVALS = ("report_interval", "validation_interval", "checkpoint_interval")  # 0 means never


@dataclass
class TrainerConfig:
    """Standard paths: seed, steps, batch size, analysis switch, learning rate, cadences, results, store."""

    seed: int = field(
        "training/seed", default=0, ge=0, lt=2**32, help="PRNG seed for initialization, data order and step keys"
    )
    steps: int = field("training/steps", default=1000, ge=0, help="total optimizer steps of the run")
    batch_size: int = field("training/batch_size", default=256, ge=0, help="global batch size; 0 means the whole split")
    analyze: bool = field(
        "training/analyze", default=True, help="run the declared tandem analyses at validation cadence"
    )
    analyses: list[Any] = field(
        "training/analyses", default=[],
        help="registered analyses to run in tandem at validation cadence, beside the job's own: each NAME or "
             "NAME,key=value,... as --analysis takes them (e.g. [logit_lens]); the CLI's --tandem NAME sets it",
    )
    analyze_strict: bool = field(
        "training/analyze_strict", default=False,
        help="a failing tandem analysis stops training instead of being recorded",
    )
    analysis_other_class: bool = field(
        "training/analysis_other_class", default=False,
        help="let an analysis add a version to an artifact that another class wrote under the same NAME",
    )
    analysis_deadline: float = field(
        "training/analysis_deadline", default=600.0, ge=0,
        help="seconds a validation's tandem work (plots, files) may take; past it the work is abandoned with "
             "one line and training goes on; 0 means no deadline",
    )
    pretrained: str | None = field(
        "model/pretrained", default=None,
        help="a Hugging Face decoder LM repo id, ORG/NAME[@REVISION] (fetched into the HF cache once), or a local "
             "folder, as the model, for the jobs that take one (lm/train, lm/eval, grokking/train); the others "
             "refuse it",
    )
    lr: float = field("optimization/lr", default=1e-3, help="peak learning rate")
    warmup_steps: int = field(
        "optimization/warmup_steps", default=0, ge=0, help="linear warmup steps before the peak rate"
    )
    weight_decay: float = field("optimization/weight_decay", default=0.0, help="decoupled (AdamW) weight decay")
    b1: float = field("optimization/b1", default=0.9, help="Adam first-moment decay")
    b2: float = field("optimization/b2", default=0.999, help="Adam second-moment decay")
    report_interval: int = field(
        "logging/report_interval", default=50, ge=0,
        help="record training values every N steps, at each checkpoint and at the end; 0 means never",
    )
    validation_interval: int = field(
        "logging/validation_interval", default=500, ge=0,
        help="validate (and run tandem analyses) every N steps; 0 means never",
    )
    analysis_interval: int = field(
        "logging/analysis_interval", default=0, ge=0,
        help="run tandem analyses at the validations of every N-th step (a multiple of the validation interval); "
             "0 means at every validation",
    )
    checkpoint_interval: int = field(
        "logging/checkpoint_interval", default=1000, ge=0,
        help="checkpoint every N steps (and at the end); 0 means never",
    )
    eval_batches: int = field(
        "logging/eval_batches", default=0, ge=0, help="batches per validation/test pass; 0 means the whole split"
    )
    headline: list[str] = field(
        "logging/headline", default=[],
        help="the value keys a run's page in `lenscope ui` opens on, in order (globs allowed, e.g. val/*); "
             "empty: the job's own losses and accuracies first, analyses' values (analysis/...) after",
    )
    results: str = field(
        "logging/results", default="./results", help="results folder; one subfolder per node <name>/<nonce>/<seq>"
    )
    mesh_shape: list[int] | None = field(
        "mesh/shape", default=None, ge=1,
        help="devices along each mesh axis (their product is the device count); null: every device on data",
    )
    mesh_axes: list[str] = field(
        "mesh/axes", default=["data"], help="mesh axis names, one per mesh/shape entry; batches split over data",
    )
    mesh_rules: list[Any] | None = field(
        "mesh/rules", default=None,
        help="ordered [regex, spec] pairs sharding parameters by path (first match wins; spec: a mesh axis, "
             "a list of axes or null per dim); null: the built-in rules for lenscope.models (docs/scale.md)",
    )
    store_url: str | None = field(
        "store/url", default=None, help="store URL or folder; default $LENSCOPE_STORE, else ./runs"
    )

    def __post_init__(self) -> None:
        """Refuse values outside their declared ranges when the config is built, before a trainer opens its store."""
        check_ranges(self)
