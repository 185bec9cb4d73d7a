"""Compiled programs saved as executables under a key of lenscope's own, so that a later process runs a prompt's
programs without tracing or lowering them (JAX's persistent cache must trace and lower a program to find it).

Only for a replacement model that states what its programs compute (its `program_key`). The key joins that key,
lenscope's source, the versions of JAX, jaxlib, NumPy, Flax and Equinox, XLA's flags, JAX's numeric settings, the
devices, the transcoders' types and specs (their arrays are arguments), the compile options, the arguments'
structure (each node's module-qualified type), shapes, dtypes and devices, and the static arguments. Arguments on
several devices, or holding a node type that is neither a plain container nor lenscope's own, are not saved.

A file starts with the SHA-256 of its whole key, checked before anything in it is read: a file copied over another
(whose name is only a prefix of its key's digest), damaged or foreign is removed and the program compiled again.
JAX serializes an executable with pickle, and loading one runs its code, so files are read only from a folder this
user owns that no one else can write (compile_cache.untrusted), and only files of this user that no one else can
write; they are written private under a temporary name (removed if the write fails), then renamed.

A program that JAX's persistent cache already held is not saved (XLA's CPU client serializes such an executable
without its code), so programs are saved by the process that compiles them first: after lenscope's source changes,
a program JAX's cache still holds is not saved again until that entry goes.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import pickle
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.experimental import serialize_executable

from ..capture.jax_private import compiled_count
from ..compile_cache import untrusted
from ..files import write_atomic
from ..training.kinds.definition_key import own_type, structure_text

FOLDER = "saved_programs"  # beside JAX's persistent cache entries, in the same folder
MAGIC = b"lenscope saved program 1\n"  # then the key's SHA-256 (32 bytes), then the pickled executable
_SETTINGS = ("jax_enable_x64", "jax_default_matmul_precision", "jax_disable_most_optimizations",
             "jax_default_prng_impl", "jax_numpy_dtype_promotion")
_PACKAGES = ("jax", "jaxlib", "numpy", "flax", "equinox")


@functools.cache
def _environment() -> str:
    """What every saved program depends on in this process: lenscope's source (each file's path and bytes), the
    package versions and XLA's flags."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent
    for folder, subfolders, names in os.walk(root):  # os.walk, not Path.rglob: a quarter of the time
        subfolders[:] = sorted(name for name in subfolders if name != "__pycache__")
        for name in sorted(name for name in names if name.endswith(".py")):
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                source = handle.read()
            digest.update(f"{os.path.relpath(path, root)}\0{len(source)}\0".encode() + source)
    for package in _PACKAGES:
        digest.update(f"{package}={getattr(importlib.import_module(package), '__version__', '-')};".encode())
    digest.update(os.environ.get("XLA_FLAGS", "").encode())
    return digest.hexdigest()


_cache_hits = [0]  # JAX's persistent-cache hits in this process (an explicit registry: JAX keeps its listeners)


def _count_hit(event: str, **_: Any) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        _cache_hits[0] += 1


jax.monitoring.register_event_listener(_count_hit)


def program_key(model: Any, transcoders: Sequence[Any]) -> str | None:
    """The key of an Attributor's programs, whose arguments hold the transcoders' arrays: the model's `program_key`
    and each transcoder's type and spec; None (nothing saved) unless the model has a key and every transcoder is
    lenscope's own."""
    key = getattr(model, "program_key", None)
    if key is None or not all(own_type(type(t)) for t in transcoders):
        return None
    parts = [f"{type(model).__qualname__}:{key}"]
    parts.extend(f"{type(t).__qualname__}:{getattr(t, 'spec', None)!r}" for t in transcoders)
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def _describe(args: Sequence[Any]) -> str | None:
    """The arguments' structure (with each node's module-qualified type), shapes, dtypes, weak types and device;
    None when a node is not a plain container or lenscope's own, its text is not faithful, or an array lies on
    several devices."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    structure = structure_text(tree)
    if structure is None:
        return None
    parts = [structure]
    for leaf in leaves:
        if isinstance(leaf, jax.Array):
            devices = leaf.sharding.device_set
            if len(devices) != 1:
                return None
            parts.append(f"{leaf.dtype.str}{leaf.shape}{leaf.weak_type}@{next(iter(devices)).id}")
        else:
            leaf = np.asarray(leaf)
            parts.append(f"{leaf.dtype.str}{leaf.shape}")
    return ";".join(parts)


def _in_tree(dynamic: Sequence[Any]) -> Any:
    """The input structure of a compiled call on its `dynamic` arguments (no keywords)."""
    return jax.tree_util.tree_structure((tuple(dynamic), {}))


class SavedPrograms:
    """One function's compiled programs, by argument shapes and static arguments: with a `key` and a `folder`,
    each is compiled once, saved, and loaded by a later process; otherwise they are `jax.jit`'s own."""

    def __init__(self, fn: Callable, name: str, key: str | None, folder: Path | None,
                 compiler_options: dict[str, Any] | None = None, static_argnums: tuple[int, ...] = ()) -> None:
        self._jit = jax.jit(fn, static_argnums=static_argnums, compiler_options=compiler_options)
        self._static = static_argnums
        options = sorted((compiler_options or {}).items())
        self._folder = None if folder is None else Path(folder) / FOLDER
        if self._folder is not None and self._folder.exists() and untrusted(self._folder) is not None:
            self._folder = None  # someone else could write there: JAX's own programs only
        self._prefix = None if key is None or self._folder is None else f"{name}|{key}|{options}"
        self._programs: dict[tuple, Any] = {}
        self.loaded = 0  # programs read from files (the rest of `count` were compiled)

    @property
    def count(self) -> int:
        """Programs compiled or loaded so far."""
        return compiled_count(self._jit) + len(self._programs)

    def __call__(self, *args: Any) -> Any:
        if self._prefix is None:
            return self._jit(*args)
        dynamic = [a for i, a in enumerate(args) if i not in self._static]
        static = tuple(args[i] for i in self._static)
        described = _describe(dynamic)
        if described is None:
            return self._jit(*args)
        program = self._programs.get((static, described))
        if program is None:
            program = self._programs[(static, described)] = self._load_or_compile(args, dynamic, static, described)
        return program(*dynamic)

    def _load_or_compile(self, args: Sequence[Any], dynamic: Sequence[Any], static: tuple, described: str) -> Any:
        settings = [str(getattr(jax.config, name, None)) for name in _SETTINGS]
        devices = [jax.default_backend(), jax.process_count(), *(d.device_kind for d in jax.local_devices())]
        text = f"{self._prefix}|{static!r}|{described}|{settings}|{devices}|{_environment()}"
        digest = hashlib.sha256(text.encode()).digest()
        path = self._folder / f"{digest.hex()[:40]}.xla"
        data = _read_own(path)
        if data is not None:
            head = MAGIC + digest
            if data.startswith(head):
                try:
                    payload, out_tree = pickle.loads(data[len(head):])
                    program = serialize_executable.deserialize_and_load(payload, _in_tree(dynamic), out_tree)
                    self.loaded += 1
                    return program
                except Exception:  # noqa: BLE001 - a damaged file: compile again, and replace it
                    pass
            path.unlink(missing_ok=True)  # another key's program (copied over this one), damaged, or foreign
        hits = _cache_hits[0]
        program = self._jit.lower(*args).compile()
        if _cache_hits[0] == hits:  # an executable JAX's cache loaded serializes without its code: not saved
            self._save(path, digest, program, _in_tree(dynamic))
        return program

    def _save(self, path: Path, digest: bytes, program: Any, in_tree: Any) -> None:
        """Write the key's digest, the program's executable and output structure to `path` (private, through a
        temporary name removed on failure); one whose structures do not survive pickling (Equinox's treedefs do
        not), or a folder that cannot be written, leaves the program unsaved. The input structure is rebuilt from
        the arguments when loading."""
        payload, compiled_in, out_tree = serialize_executable.serialize(program)
        if compiled_in != in_tree or pickle.loads(pickle.dumps(out_tree)) != out_tree:
            return
        data = MAGIC + digest + pickle.dumps((payload, out_tree))
        try:
            path.parent.mkdir(exist_ok=True, mode=0o700)
            write_atomic(path, data, sync=False, private=True)
        except OSError:
            return


def _read_own(path: Path) -> bytes | None:
    """The bytes of `path` if it is a regular file of this user that no one else can write (never through a
    symlink); None otherwise, or when it cannot be read."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(handle, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            return None
        try:
            return file.read()
        except OSError:
            return None
