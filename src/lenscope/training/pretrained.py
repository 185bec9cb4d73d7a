"""`model/pretrained=PATH` for any job: the jobs that take a pretrained decoder LM, and a clear refusal elsewhere.

A job takes one by mixing `PretrainedModel` into its trainer (and `PretrainedConfig` into its CONFIG); its
`build_model()` then returns `self.pretrained.model`. The checkpoint is read straight into the shardings
the job's mesh rules give each parameter (`mesh/shape`, `mesh/rules`), leaf by leaf, so no matrix is ever
whole on one device. Every other job refuses `model/pretrained` before it writes anything, naming the jobs
that accept it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Literal

from ..config import field
from ..errors import ConfigError
from ..job_registry import job_name, jobs

__all__ = ["PROCESSING", "PretrainedConfig", "PretrainedModel", "check_pretrained", "pretrained_jobs"]

PROCESSING = ("fold_ln", "center_writing_weights", "center_unembed", "fold_value_biases")
KIND = "a decoder-only language model (lenscope.models.pretrained.Decoder, an Equinox module)"


@dataclass
class PretrainedConfig:
    """The weights' dtype and TransformerLens-style weight processing of a job's pretrained checkpoint."""

    dtype: Literal["float32", "bfloat16"] = field("model/dtype", default="float32", help="weights' dtype")
    fold_ln: bool = field("model/fold_ln", default=False, help="fold each norm's scale (and bias) into the next "
                          "linear layer (TransformerLens's fold_ln)")
    center_writing_weights: bool = field("model/center_writing_weights", default=False,
                                         help="remove the mean over d_model of every write to the residual stream "
                                              "(LayerNorm models)")
    center_unembed: bool = field("model/center_unembed", default=False,
                                 help="remove each position's mean over the vocabulary from the unembedding")
    fold_value_biases: bool = field("model/fold_value_biases", default=False,
                                    help="move the value biases into the attention output bias")


def pretrained_jobs() -> list[str]:
    """The registered trainers that take `model/pretrained`, by name (the analyses built on them take it too)."""
    return [name for name, cls in jobs().items()
            if getattr(cls, "TAKES_PRETRAINED", False) and not callable(getattr(cls, "analyze", None))]


def check_pretrained(job: type, args: Any) -> None:
    """ConfigError when `model/pretrained` is set for a job that builds its own model instead."""
    if getattr(args, "pretrained", None) and not getattr(job, "TAKES_PRETRAINED", False):
        raise ConfigError(
            f"job {job_name(job)} does not take model/pretrained={args.pretrained}: it builds its "
            f"own model ({job.__name__}.build_model()), while model/pretrained loads {KIND}. "
            f"Jobs that take one: {', '.join(pretrained_jobs())} and the analyses built on them; a job of your own "
            "takes one by mixing lenscope.PretrainedModel into its trainer (and PretrainedConfig into its config)")


class PretrainedModel:
    """A trainer mixin: `pretrained` is the job's checkpoint, loaded once onto its mesh, weight processing applied."""

    TAKES_PRETRAINED: ClassVar[bool] = True
    args: Any
    placement: Any

    @cached_property
    def pretrained(self) -> Any:
        """The checkpoint (model, tokenizer, config) from `model/pretrained`, read into the parameters' shardings."""
        path = getattr(self.args, "pretrained", None)
        if not path:
            raise ConfigError("model/pretrained is required: a Hugging Face repo id, e.g. "
                              "model/pretrained=openai-community/gpt2 (or ORG/NAME@REVISION), or a local folder")
        # lazy: equinox and the decoder load only for jobs that use a checkpoint
        from ..models.pretrained import from_pretrained_no_processing, process
        placement = self.placement
        mesh = None if placement.single else placement.mesh
        loaded = from_pretrained_no_processing(path, dtype=self.args.dtype, mesh=mesh,
                                               shardings=None if mesh is None else placement.param_sharding)
        loaded.model = process(loaded.model, **{name: getattr(self.args, name) for name in PROCESSING})
        return loaded

    def build_model(self) -> Any:
        """The pretrained Decoder (an Equinox module holding the checkpoint's weights)."""
        return self.pretrained.model
