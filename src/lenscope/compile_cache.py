"""JAX's persistent compilation cache, on by default: a second process at the same shapes skips XLA.

`$LENSCOPE_COMPILE_CACHE` chooses the folder (`off` turns the cache off). Unset, a job uses
`<store root>/compile_cache`, and a user of `from_pretrained` or an `Attributor` without a store the user's
cache folder (`$XDG_CACHE_HOME/lenscope/compile_cache`, else `~/.cache/lenscope/compile_cache`, made private
to the user). JAX keys every entry by the lowered program (debug info stripped), the compile options, the
devices and the JAX version, so a changed `analyze` is a new entry and an entry never serves another program.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

__all__ = ["ENV", "cache_folder", "use_compile_cache", "use_user_compile_cache", "user_cache_folder"]

ENV = "LENSCOPE_COMPILE_CACHE"
_chosen: list[Path | None] = []  # the folder this process uses, once decided (the first store's wins)


def cache_folder(store_root: Path | str) -> Path | None:
    """The cache folder a job on the store at `store_root` uses; None when `$LENSCOPE_COMPILE_CACHE=off`."""
    configured = os.environ.get(ENV, "").strip()
    if configured.lower() == "off":
        return None
    return Path(configured) if configured else Path(store_root) / "compile_cache"


def user_cache_folder() -> Path | None:
    """The cache folder of a process without a store; None when `$LENSCOPE_COMPILE_CACHE=off`."""
    configured = os.environ.get(ENV, "").strip()
    if configured.lower() == "off":
        return None
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "lenscope" / "compile_cache"


def use_user_compile_cache() -> Path | None:
    """Turn the persistent cache on in the user's cache folder, once a process (a job's store may have chosen
    first); the folder in use, None when off."""
    folder = user_cache_folder()
    if not _chosen and folder is not None and not folder.exists() and _writable(folder):
        folder.mkdir(parents=True, mode=0o700)  # the user's own: another user's programs never land in it
    return _use(folder)


def _writable(folder: Path) -> bool:
    """Whether `folder`, or the nearest folder above it that exists, can be written by this process."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return candidate.is_dir() and os.access(candidate, os.W_OK)
    return False


def use_compile_cache(store_root: Path | str) -> Path | None:
    """Turn the persistent cache on for a job on the store at `store_root`, once a process; the folder in use
    (None when off). A process has one cache: the first store's folder is kept for later stores."""
    return _use(cache_folder(store_root))


def _use(folder: Path | None) -> Path | None:
    """The process's cache: `folder` on the first call (a folder set through JAX's own `jax_compilation_cache_dir`
    is respected), whatever the first call chose on later ones."""
    if _chosen:
        return _chosen[0]
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
