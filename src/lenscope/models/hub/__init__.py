"""The Hugging Face Hub: models, dictionaries and corpora by name, fetched safely into the HF cache (huggingface_hub).

A repo id (`org/name`, `org/name@revision`) or an `hf://` address becomes a local folder of the cache;
nothing else in lenscope talks to the hub. docs/pretrained.md and docs/dictionaries.md say how to use it.
"""

from .address import HF, Address, is_hub_address, parse_address, split_revision
from .checkpoint import fetch_checkpoint
from .download import fetch
from .settings import hub_cache, settings

__all__ = ["HF", "Address", "fetch", "fetch_checkpoint", "hub_cache", "is_hub_address", "parse_address", "settings",
           "split_revision"]
