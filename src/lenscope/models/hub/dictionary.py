"""Where a SAELens-format dictionary lives: a folder, a hub address, or a SAELens release's SAE (fetched once)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ...errors import UsageError
from .address import Address, is_hub_address, parse_address
from .download import fetch
from .saelens_names import SAELENS, release_address

__all__ = ["FORMS", "dictionary_folder", "is_named_dictionary"]

FILES = ("cfg.json", "sae_weights.safetensors")
FORMS = ("a SAELens folder (cfg.json + sae_weights.safetensors), hf://ORG/REPO[/SUBFOLDER][@REVISION], or "
         "saelens://RELEASE/SAE_ID (SAELens' name for it)")


def is_named_dictionary(value: object) -> bool:
    """Whether `value` names a dictionary on the hub (hf://... or saelens://...)."""
    return isinstance(value, str) and (is_hub_address(value) or value.startswith(SAELENS))


def _complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in FILES)


def _refuse(address: Address) -> Callable[[list[str], list[str]], None]:
    """The check before anything is fetched: the address names a SAELens folder."""
    def check(chosen: list[str], every: list[str]) -> None:
        missing = [name for name in FILES if name not in chosen]
        if missing:
            raise UsageError(f"{address} is not a SAELens dictionary: it lacks {', '.join(missing)}; it holds "
                             f"{', '.join(sorted(every)[:12]) or 'nothing'}; expected {FORMS}")
    return check


def dictionary_folder(name: str | os.PathLike, sae_id: str | None = None) -> Path:
    """The local folder of a dictionary: `name` itself, or the cached copy of hf://... or saelens://RELEASE/SAE_ID
    (or release `name` with `sae_id`), downloaded when the cache lacks it."""
    if sae_id is not None:
        address = release_address(str(name), sae_id)
    elif isinstance(name, str) and name.startswith(SAELENS):
        release, _, rest = name[len(SAELENS):].partition("/")
        if not release or not rest:
            raise UsageError(f"{name!r}: expected saelens://RELEASE/SAE_ID, e.g. "
                             "saelens://gpt2-small-res-jb/blocks.0.hook_resid_pre")
        address = release_address(release, rest)
    elif is_hub_address(name):
        address = parse_address(str(name))
    else:
        return Path(name)
    return fetch(address, FILES, _complete, _refuse(address))
