"""A model repo on the hub as a local checkpoint folder: only the files lenscope reads, never pickled weights."""

from __future__ import annotations

import json
from pathlib import Path

from ...errors import UsageError
from .address import Address
from .download import fetch

__all__ = ["MODEL_FILES", "PICKLES", "fetch_checkpoint"]

MODEL_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json", "model-*-of-*.safetensors",
               "tokenizer.json", "tokenizer_config.json", "generation_config.json")
PICKLES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
INDEX = "model.safetensors.index.json"


def complete(folder: Path) -> bool:
    """Whether `folder` holds config.json and every safetensors file of its weights (one file or an index's)."""
    if not (folder / "config.json").is_file():
        return False
    if (folder / "model.safetensors").is_file():
        return True
    if not (folder / INDEX).is_file():
        return False
    try:
        shards = set(json.loads((folder / INDEX).read_text())["weight_map"].values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return True  # a damaged index is SafetensorsFiles' to report, naming the file
    return all((folder / shard).is_file() for shard in shards)


def _refuse(address: Address):
    """The check of a repo's file list before anything is downloaded."""
    def check(chosen: list[str], every: list[str]) -> None:
        listed = ", ".join(sorted(every)[:12]) or "nothing"
        if "config.json" not in chosen:
            raise UsageError(f"model {address.repo}@{address.revision or 'main'} has no config.json, so it is not a "
                             f"Hugging Face model repo; it holds: {listed}")
        if "model.safetensors" in chosen or INDEX in chosen:
            return
        pickles = [name for name in every if name.endswith(PICKLES)]
        if pickles:
            raise UsageError(f"model {address.repo}@{address.revision or 'main'} has only pickled weights "
                             f"({', '.join(sorted(pickles)[:4])}), which lenscope never loads (a pickle runs code "
                             "when read): use a revision with model.safetensors (many repos have one on the "
                             "'refs/pr/N' branch of the hub's safetensors conversion), or convert it yourself with "
                             "transformers' save_pretrained(folder, safe_serialization=True) and pass the folder")
        raise UsageError(f"model {address.repo}@{address.revision or 'main'} has neither model.safetensors nor "
                         f"{INDEX}; it holds: {listed}")
    return check


def fetch_checkpoint(repo: str, revision: str | None = None) -> Path:
    """The cached snapshot of model `repo` at `revision` (downloaded when missing) with the files lenscope reads."""
    address = Address(repo, "model", revision)
    return fetch(address, MODEL_FILES, complete, _refuse(address))
