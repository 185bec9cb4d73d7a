"""Where a checkpoint lives: a local folder, or a repo id already in the local Hugging Face cache (no network)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ...errors import UsageError

__all__ = ["hub_cache", "locate"]

REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def hub_cache() -> Path:
    """The Hugging Face hub cache: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path("~/.cache/huggingface").expanduser()
    return Path(home) / "hub"


def locate(name: str | os.PathLike) -> Path:
    """The folder holding config.json: `name` itself, or the cached snapshot of repo id `name` (refs/main first)."""
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UsageError(f"{path} is a folder but has no config.json; expected a Hugging Face model folder "
                             "(config.json, model.safetensors or model.safetensors.index.json, tokenizer.json)")
        return path
    text = str(name)
    if not REPO_ID.match(text):
        raise UsageError(f"no model folder {text!r}: expected a local folder with config.json, or a repo id "
                         "'org/name' already in the local Hugging Face cache")
    repo = hub_cache() / ("models--" + text.replace("/", "--"))
    snapshots = repo / "snapshots"
    ref = repo / "refs" / "main"
    candidates = []
    if ref.is_file():
        candidates.append(snapshots / ref.read_text().strip())
    if snapshots.is_dir():
        candidates += sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    for snapshot in candidates:
        if (snapshot / "config.json").is_file():
            return snapshot
    raise UsageError(f"{text!r} is neither a local folder nor in the Hugging Face cache: looked for "
                     f"{snapshots}/<revision>/config.json (set HF_HOME or HF_HUB_CACHE to another cache); "
                     "lenscope never downloads: fetch it with `huggingface-cli download "
                     f"{text}` on a machine with network, or pass the folder")
