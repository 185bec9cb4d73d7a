"""JAX's persistent compilation cache, on by default: a second process at the same shapes skips XLA.

`$LENSCOPE_COMPILE_CACHE` chooses the folder (`off` turns the cache off). Unset, a job uses
`<store root>/compile_cache`, and a user of `from_pretrained` or an `Attributor` without a store the user's
cache folder (`$XDG_CACHE_HOME/lenscope/compile_cache`, else `~/.cache/lenscope/compile_cache`, made private
to the user). JAX keys every entry by the lowered program (debug info stripped), the compile options, the
devices and the JAX version, so a changed `analyze` is a new entry and an entry never serves another program.

A cache holds programs this process runs, so a folder is used only when it can be trusted (`untrusted`): owned by
this user and writable by no one else, and no folder above it writable by others without the sticky bit. Anything
else (another user's folder, a world-writable one, a shared store's group-writable `compile_cache`) is refused with
one warning naming the folder and the fix, and the process runs without a cache. A folder lenscope makes is private.
"""

from __future__ import annotations

import contextlib
import os
import stat
import warnings
from pathlib import Path

import jax

__all__ = ["ENV", "UntrustedCache", "cache_folder", "untrusted", "use_compile_cache", "use_user_compile_cache",
           "user_cache_folder"]

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


class UntrustedCache(UserWarning):
    """A compile cache folder refused: someone other than this user could write programs into it."""


def untrusted(folder: Path | str) -> str | None:
    """Why programs in `folder` (an existing folder) cannot be trusted, or None when they can: it must be owned by
    this user and writable by no one else, and every folder above it owned by this user or root, or not writable by
    others, or sticky (as /tmp is, where no one may rename another's folder)."""
    real = Path(os.path.realpath(folder))
    me = os.geteuid()
    try:
        info = os.stat(real)
    except OSError as err:
        return f"it cannot be examined ({err.strerror})"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder"
    if info.st_uid != me:
        return f"it is owned by user id {info.st_uid}, not by this user (id {me})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        whom = "others" if info.st_mode & stat.S_IWOTH else "its group"
        return f"it is writable by {whom} (mode {info.st_mode & 0o777:o})"
    for above in real.parents:
        info = os.stat(above)
        if info.st_mode & stat.S_ISVTX or info.st_uid in (me, 0) and not info.st_mode & stat.S_IWOTH:
            continue
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"the folder above it, {above}, can be written by others (mode {info.st_mode & 0o777:o}): " \
                   "they could put another folder in its place"
    return None


def trusted(folder: Path, what: str) -> Path | None:
    """`folder` if it can be trusted (made private when missing), else None after one warning naming `what` folder,
    why, and the fix."""
    if not folder.exists() and not folder.is_symlink():
        # the user's own: another user's programs never land in it (made by another process first, or not at all:
        # checked below like any existing folder)
        with contextlib.suppress(OSError):
            folder.mkdir(parents=True, mode=0o700)
    problem = untrusted(folder)
    if problem is None:
        return folder
    warnings.warn(f"{what} {folder} is not used: {problem}. Programs in it would run as you; make it yours and "
                  f"private (chmod go-w), or set ${ENV} to a folder of your own (or to off). Running without it.",
                  UntrustedCache, stacklevel=3)
    return None


def use_user_compile_cache() -> Path | None:
    """Turn the persistent cache on in the user's cache folder, once a process (a job's store may have chosen
    first); the folder in use, None when off or refused."""
    return _use(user_cache_folder())


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
    if jax.config.jax_compilation_cache_dir:
        folder = trusted(Path(jax.config.jax_compilation_cache_dir), "JAX's compilation cache folder")
        if folder is None:
            jax.config.update("jax_enable_compilation_cache", False)
    elif folder is not None:
        # a read-only store: no cache, rather than a warning per compilation
        folder = trusted(folder, "the compile cache folder") if _writable(folder) else None
        if folder is not None:
            jax.config.update("jax_compilation_cache_dir", str(folder))
    if folder is not None:
        # Analyses compile in well under JAX's default one second, and those are the compilations a user waits on.
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    _chosen.append(folder)
    return folder
