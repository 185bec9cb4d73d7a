"""The Hugging Face environment variables, read when a download starts (not when a library was imported)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULT_ENDPOINT", "Settings", "hub_cache", "settings"]

DEFAULT_ENDPOINT = "https://huggingface.co"
TRUE = {"1", "on", "yes", "true"}


def hub_cache() -> Path:
    """The Hugging Face hub cache: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path("~/.cache/huggingface").expanduser()
    return Path(home).expanduser() / "hub"


@dataclass(frozen=True)
class Settings:
    """Where the hub is (HF_ENDPOINT), the token (HF_TOKEN), the cache, offline mode and the request timeout."""

    endpoint: str
    token: str | None
    cache: Path
    offline: bool
    timeout: float


def settings() -> Settings:
    """The hub settings of this moment's environment (HF_ENDPOINT, HF_TOKEN, HF_HUB_CACHE/HF_HOME, HF_HUB_OFFLINE,
    HF_HUB_ETAG_TIMEOUT)."""
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in TRUE
    return Settings(endpoint=(os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
                    token=os.environ.get("HF_TOKEN") or None, cache=hub_cache(), offline=offline,
                    timeout=float(os.environ.get("HF_HUB_ETAG_TIMEOUT") or 10))
