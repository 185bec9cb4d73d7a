"""Where a checkpoint lives: a local folder, or a repo id on the Hugging Face Hub (fetched into its cache once)."""

from __future__ import annotations

import os
from pathlib import Path

from ...errors import UsageError
from ..hub import fetch_checkpoint, hub_cache, split_revision
from ..hub.address import REPO_ID

__all__ = ["hub_cache", "locate"]


def locate(name: str | os.PathLike, revision: str | None = None) -> Path:
    """The folder holding config.json: `name` itself, or the cached snapshot of repo id `name` (`org/name`, or
    `org/name@revision`) at `revision`, downloaded from the hub when the cache lacks it (models/hub)."""
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UsageError(f"{path} is a folder but has no config.json; expected a Hugging Face model folder "
                             "(config.json, model.safetensors or model.safetensors.index.json, tokenizer.json)")
        if revision is not None:
            raise UsageError(f"revision={revision!r} was given with the folder {path}; a revision chooses a commit "
                             "of a repo id ('org/name'): drop it, or pass the repo id")
        return path
    repo, at = split_revision(str(name))
    if at is not None and revision is not None and at != revision:
        raise UsageError(f"{name!r} names revision {at!r} but revision={revision!r} was also given; give one")
    if not REPO_ID.match(repo):
        raise UsageError(f"no model folder {str(name)!r}: expected a local folder with config.json, or a Hugging "
                         "Face repo id 'org/name' (optionally 'org/name@revision'), e.g. 'openai-community/gpt2'")
    return fetch_checkpoint(repo, revision or at)
