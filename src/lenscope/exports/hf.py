"""`lenscope export NODE --to hf DIR`: a language model's checkpoint as a Hugging Face folder transformers reads."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from ..files import staged_folder
from ..job_registry import job_name, jobs
from ..models.pretrained.export_hf import save_hf_folder
from ..runner import build_job
from ..store import Node, Store

__all__ = ["to_hf"]


def _job_of(node: Node, job: str | None) -> str:
    """The job that made `node`: `job` when given, else the registered job whose node name is `node.name`."""
    if job:
        return job
    for name, cls in jobs().items():
        if Node.clean_name(job_name(cls)) == node.name:
            return name
    raise UsageError(f"node {node} was made by no registered job (its name {node.name!r}); name the job that "
                     "trained it: --job module:Class or --job path/to/file.py:Class")


def to_hf(store: Store, node: Node, folder: str | Path, job: str | None = None) -> Path:
    """The model of `node`'s checkpoint (restored by its job, writing nothing to the store) saved into `folder`:
    staged in a new folder of its own beside it (files.staged_folder), removed on any failure; a `folder` that is a
    link or holds something is refused before the job is built."""
    with staged_folder(folder, "--to hf") as staging:
        trainer = build_job(_job_of(node, job), [], base=node, store=store)
        pretrained = getattr(trainer, "pretrained", None)
        if pretrained is None:
            raise UsageError(f"node {node} is not a language model's ({trainer.name} has no decoder); `--to hf` "
                             "exports lm/train, induction/train and other decoder jobs' checkpoints")
        try:
            trainer.setup()
            model = trainer.module(trainer.state.params)
            save_hf_folder(model, pretrained.config, pretrained.hf_config, staging, pretrained.tokenizer)
        finally:
            trainer.cleanup()
    return Path(folder)
