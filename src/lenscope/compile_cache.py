"""JAX's persistent compilation cache, on by default beside the store: a second run at the same shapes skips XLA.

`$LENSCOPE_COMPILE_CACHE` chooses the folder (`off` turns the cache off); unset, it is
`<store root>/compile_cache`. JAX keys every entry by the lowered program (debug info stripped),
the compile options, the devices and the JAX version, so a changed `analyze` is a new entry.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

__all__ = ["ENV", "cache_folder", "use_compile_cache"]

ENV = "LENSCOPE_COMPILE_CACHE"
_chosen: list[Path | None] = []  # the folder this process uses, once decided (the first store's wins)


def cache_folder(store_root: Path | str) -> Path | None:
    """The cache folder a job on the store at `store_root` uses; None when `$LENSCOPE_COMPILE_CACHE=off`."""
    configured = os.environ.get(ENV, "").strip()
    if configured.lower() == "off":
        return None
    return Path(configured) if configured else Path(store_root) / "compile_cache"


def _writable(folder: Path) -> bool:
    """Whether `folder`, or the nearest folder above it that exists, can be written by this process."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return candidate.is_dir() and os.access(candidate, os.W_OK)
    return False


def use_compile_cache(store_root: Path | str) -> Path | None:
    """Turn the persistent cache on for this process, once; the folder in use (None when off).

    A process has one cache: the first store's folder is kept for later stores, and a folder set
    through JAX's own `jax_compilation_cache_dir` is respected.
    """
    if _chosen:
        return _chosen[0]
    folder = cache_folder(store_root)
    if folder is not None and not _writable(folder):
        folder = None  # a read-only store: no cache, rather than a warning per compilation
    if jax.config.jax_compilation_cache_dir:
        folder = Path(jax.config.jax_compilation_cache_dir)
    elif folder is not None:
        jax.config.update("jax_compilation_cache_dir", str(folder))
    if folder is not None:
        # Analyses compile in well under JAX's default one second, and those are the compilations a user waits on.
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    _chosen.append(folder)
    return folder
