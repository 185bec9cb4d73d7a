"""SAELens' release names (`gpt2-small-res-jb` + `blocks.0.hook_resid_pre`) as hub addresses, read from the installed
sae-lens package's own directory of releases (its `pretrained_saes.yaml`), without importing sae-lens (or torch)."""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path
from typing import Any

from ...errors import UsageError, hint
from .address import Address

__all__ = ["SAELENS", "directory_file", "release_address"]

SAELENS = "saelens://"
DIRECTORY = "pretrained_saes.yaml"


def directory_file() -> Path:
    """The installed sae-lens package's directory of releases; a UsageError saying how to install it."""
    spec = importlib.util.find_spec("sae_lens")  # finds the package without running it
    folders = list(spec.submodule_search_locations or ()) if spec is not None else []
    for folder in folders:
        if (Path(folder) / DIRECTORY).is_file():
            return Path(folder) / DIRECTORY
    raise UsageError("SAELens release names are looked up in the directory of releases of the sae-lens package, "
                     f"which is {'not installed' if spec is None else 'installed without ' + DIRECTORY}: "
                     "pip install sae-lens (or pip install 'lenscope[saelens]'), or give the SAE's place on the hub "
                     "directly: hf://ORG/REPO/PATH")


TOP_KEY = re.compile(r"^([^\s#][^:]*):", re.MULTILINE)


@functools.cache
def _blocks(path: Path, stamp: float) -> tuple[str, dict[str, tuple[int, int]]]:
    """(the directory's text, {release: (start, end) of its block}): one release is parsed, not all of them."""
    text = path.read_text(encoding="utf-8")
    keys = [(m.group(1).strip().strip("'\""), m.start()) for m in TOP_KEY.finditer(text)]
    ends = [start for _, start in keys[1:]] + [len(text)]
    return text, {name: (start, end) for (name, start), end in zip(keys, ends)}


def _release(path: Path, release: str) -> tuple[dict[str, Any] | None, list[str]]:
    """(the directory's entry of `release` or None, every release's name)."""
    import yaml  # lazy: read only when a release name is given

    text, blocks = _blocks(path, path.stat().st_mtime)
    if release not in blocks:
        return None, list(blocks)
    start, end = blocks[release]
    entry = yaml.load(text[start:end], Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    return entry.get(release), list(blocks)


def release_address(release: str, sae_id: str) -> Address:
    """The hub address (repo, folder) of SAE `sae_id` of SAELens release `release`."""
    path = directory_file()
    entry, releases = _release(path, release)
    if not isinstance(entry, dict):
        raise UsageError(f"SAELens release {release!r} is not in sae-lens' directory ({path})"
                         f"{hint(release, releases)}; see SAELens' list of pretrained SAEs, or give hf://ORG/REPO/PATH")
    saes = {str(sae["id"]): str(sae["path"]) for sae in entry.get("saes", ())}
    if sae_id not in saes:
        raise UsageError(f"SAELens release {release!r} has no SAE id {sae_id!r}{hint(sae_id, saes)}; it has "
                         f"{len(saes)}, e.g. {', '.join(list(saes)[:4])}")
    if entry.get("conversion_func"):
        raise UsageError(f"SAELens release {release!r} stores its SAEs in another format than SAELens' own "
                         f"(sae-lens converts it with {entry['conversion_func']!r}), which lenscope does not read; "
                         "load it with SAELens and save it with SAE.save_model(folder), then pass the folder")
    return Address(str(entry["repo_id"]), "model", None, saes[sae_id].strip("/"))
