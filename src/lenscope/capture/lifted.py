"""What a function reads from outside its arguments, split into a compiled program's arguments and its key.

A hook or patch function compiled into a program must answer what it means at call time (P7). Everything it
reads besides its arguments (globals, closure cells, `functools.partial` arguments, defaults, and the
attributes its code names on an object it reads) is either:
- a *leaf*: an array or a number, passed to the program as an argument, so it changes without a recompile;
- or part of the *key*: anything else (code, strings, modules, shapes of containers, values needed concretely),
  so a change compiles a new program.

`lift(fn)` walks the function once per call (the walk of each code object is cached) and returns both, with
`rebuild(leaves)`: the same function with the given (traced) leaves put where the values were read. The rebuilt
function reads a copy of its globals, so writes it makes there never reach the user's module.
"""

from __future__ import annotations

import dis
import enum
import functools
import hashlib
import types
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

__all__ = ["Identity", "Lifted", "Mode", "SideEffect", "lift", "writes_outside"]

MAX_DEPTH = 6  # how deep a walk follows functions, containers and attributes before it keys by identity
NUMBERS = (int, float, complex)  # exact types: bool and enums are keys (they choose code paths)
# Callables from these libraries are keyed by identity: their behaviour does not depend on the user's state.
# An object's list, dict or set attribute is keyed by identity: code appends to it (a record kept across calls) far
# more often than it reads it to decide what to compute; assigning a new one is seen.
SINKS = (list, dict, set)
CONSTRUCTORS = ("__init__", "__post_init__")  # what these assign is configuration: read, so keyed
LIBRARIES = ("jax", "jaxlib", "numpy", "builtins", "functools", "operator", "math", "equinox", "flax", "einops",
             "optax", "scipy", "matplotlib", "torch")
# Classes whose methods' names are not an object's reads (lenscope's own analysis and trainer machinery); lenscope's
# functions are walked as a user's are (a hook it builds, e.g. an SAE's splice, closes over arrays)
FRAMEWORK = (*LIBRARIES, "lenscope")


class SideEffect(Exception):
    """A hook's effect outside itself met a traced value (print, a changed list): the call must run eagerly."""


def _print(*args: Any, **kwargs: Any) -> None:
    """`print` as a rebuilt hook sees it: a traced value cannot be shown, so the hook must run eagerly."""
    if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves((args, kwargs))):
        raise SideEffect("a hook prints a traced value")
    print(*args, **kwargs)


class Mode(enum.IntEnum):
    """How a function's outside reads enter its program, tried in this order when a trace needs concrete values."""

    TRACED = 0  # arrays and numbers are arguments
    STATIC_NUMBERS = 1  # numbers are keys (a slice bound, a range, an `if`), arrays arguments
    STATIC = 2  # arrays are keys too (by identity; NumPy arrays, which change in place, by content)


class Identity:
    """A key part equal only to the same object (kept alive by the key, so its id is never reused)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Identity) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __repr__(self) -> str:
        return f"Identity({type(self.obj).__name__})"


@dataclass(frozen=True)
class Lifted:
    """A function's outside reads: the program `key`, its argument `leaves`, and `rebuild(leaves)`."""

    key: Hashable
    leaves: tuple[Any, ...]
    _build: Callable[[Iterator[Any]], Any] = field(repr=False, compare=False)
    containers: list[tuple[Any, int]] = field(default_factory=list, repr=False, compare=False)

    def rebuild(self, leaves: Any) -> Any:
        """The function with `leaves` (traced or concrete, in order) where its outside values were read."""
        return self._build(iter(leaves))


@functools.lru_cache(maxsize=4096)
def _names(code: types.CodeType) -> frozenset[str]:
    """Every name a code object and the code nested in it use (globals and attribute names alike)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return frozenset(names)


@functools.lru_cache(maxsize=4096)
def _stored(code: types.CodeType) -> frozenset[str]:
    """The attribute names a code object (or code nested in it) assigns: `obj.x = ...`, `type(self).n += 1`."""
    found = {ins.argval for ins in dis.get_instructions(code) if ins.opname in ("STORE_ATTR", "DELETE_ATTR")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found |= _stored(const)
    return frozenset(found)


@functools.lru_cache(maxsize=1024)
def _class_code(klass: type) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(names used, attribute names assigned after construction, attribute names `__init__` assigns) by the methods
    of a class's own code (its MRO's classes outside the FRAMEWORK): what `self.helper()` and `super().analyze()`
    read is read by the object; what a method assigns after construction is state it keeps, not configuration."""
    used: set[str] = set()
    stored: set[str] = set()
    configured: set[str] = set()
    for base in klass.__mro__:
        if (base.__module__ or "").split(".", 1)[0] in FRAMEWORK:
            continue
        for name, member in vars(base).items():
            code = getattr(getattr(member, "__func__", member), "__code__", None)
            if isinstance(code, types.CodeType):
                used |= _names(code)
                (configured if name in CONSTRUCTORS else stored).update(_stored(code))
    return frozenset(used), frozenset(stored), frozenset(configured)


@functools.lru_cache(maxsize=4096)
def _writes(code: types.CodeType) -> tuple[str, ...]:
    """The globals and closure variables a code object (or code nested in it) assigns: `global x; x = ...`."""
    found = [ins.argval for ins in dis.get_instructions(code)
             if ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL")
             or (ins.opname in ("STORE_DEREF", "DELETE_DEREF") and ins.argval in code.co_freevars)]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found.extend(name for name in _writes(const) if name not in const.co_cellvars)
    return tuple(dict.fromkeys(found))


def writes_outside(fn: Any) -> tuple[str, ...]:
    """The global or closure variables `fn` assigns (a side effect a compiled program would drop silently)."""
    fn = getattr(fn, "func", fn)
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    return _writes(code) if isinstance(code, types.CodeType) else ()


def _is_library(value: Any) -> bool:
    module = getattr(value, "__module__", None) or type(value).__module__ or ""
    return module.split(".", 1)[0] in LIBRARIES


def _digest(array: np.ndarray) -> tuple:
    return (array.shape, str(array.dtype), hashlib.blake2b(np.ascontiguousarray(array).tobytes(), digest_size=16)
            .hexdigest())


class _Walk:
    """One lift: collects leaves and the containers rebuilt for the program, returns (key, build) per value."""

    def __init__(self, mode: Mode, by_attributes: bool = False) -> None:
        self.mode, self.by_attributes = mode, by_attributes
        self.leaves: list[Any] = []
        self.containers: list[tuple[Any, int]] = []
        self.visiting: set[int] = set()

    def value(self, v: Any, depth: int) -> tuple[Hashable, Callable[[Iterator[Any]], Any]]:
        t = type(v)
        if t in NUMBERS or isinstance(v, (np.generic, np.ndarray, jax.Array)):
            return self._array(v)
        if v is None or t in (bool, str, bytes, type(Ellipsis), range, frozenset) or isinstance(v, enum.Enum):
            return (t, v), lambda it: v
        if t is slice:  # a slice's bounds are Python control (static): keyed by value
            return (t, _static(v.start), _static(v.stop), _static(v.step)), lambda it: v
        if depth >= MAX_DEPTH:
            return Identity(v), lambda it: v
        if self.by_attributes and t in SINKS:
            return Identity(v), lambda it: v
        if t in (list, tuple, dict) or (isinstance(v, tuple) and hasattr(v, "_fields")):
            return self._container(v, depth)
        if isinstance(v, functools.partial):
            return self._partial(v, depth)
        if isinstance(v, types.MethodType):
            fkey, fbuild = self.value(v.__func__, depth + 1)
            skey, sbuild = self.value(v.__self__, depth + 1)
            return ("method", fkey, skey), lambda it: types.MethodType(fbuild(it), sbuild(it))
        if isinstance(v, types.FunctionType) and not _is_library(v):
            return self.function(v, depth)
        if isinstance(v, (types.ModuleType, type, types.BuiltinFunctionType, types.CodeType)) \
                or _is_library(v):
            return _static(v), lambda it: v
        return self._object(v, depth)

    def _array(self, v: Any) -> tuple[Hashable, Callable[[Iterator[Any]], Any]]:
        is_number = type(v) in NUMBERS or isinstance(v, np.generic)
        if self.mode == Mode.TRACED or (self.mode == Mode.STATIC_NUMBERS and not is_number):
            self.leaves.append(v)
            return "leaf", lambda it: next(it)
        if is_number:
            return (type(v), v.item() if isinstance(v, np.generic) else v), lambda it: v
        key = _digest(v) if isinstance(v, np.ndarray) else Identity(v)
        return key, lambda it: v

    def _container(self, v: Any, depth: int) -> tuple[Hashable, Callable[[Iterator[Any]], Any]]:
        items = list(v.items()) if isinstance(v, dict) else list(enumerate(v))
        parts = [(k, *self.value(x, depth + 1)) for k, x in items]
        key = (type(v), tuple((_static(k), part) for k, part, _ in parts))
        mutable = isinstance(v, (list, dict))

        def build(it: Iterator[Any]) -> Any:
            values = [(k, b(it)) for k, _, b in parts]
            if isinstance(v, dict):
                out: Any = type(v)(values) if type(v) is dict else dict(values)
            elif hasattr(v, "_fields"):
                out = type(v)(*(x for _, x in values))
            else:
                out = type(v)(x for _, x in values)
            if mutable:
                self.containers.append((out, len(out)))
            return out
        return key, build

    def _partial(self, v: functools.partial, depth: int) -> tuple[Hashable, Callable[[Iterator[Any]], Any]]:
        fkey, fbuild = self.value(v.func, depth + 1)
        akey, abuild = self._container(tuple(v.args), depth)
        kkey, kbuild = self._container(dict(v.keywords), depth)
        return ("partial", fkey, akey, kkey), lambda it: functools.partial(fbuild(it), *abuild(it), **kbuild(it))

    def function(self, fn: types.FunctionType, depth: int) -> tuple[Hashable, Callable[[Iterator[Any]], Any]]:
        """A Python function: its code in the key, its globals, closure and defaults walked."""
        if id(fn) in self.visiting:  # recursion: the inner reference reads the user's own function
            return Identity(fn), lambda it: fn
        self.visiting.add(id(fn))
        try:
            code, globs = fn.__code__, fn.__globals__
            names = sorted(n for n in _names(code) if n in globs)
            gparts = [(n, *self.value(globs[n], depth + 1)) for n in names]
            cells = fn.__closure__ or ()
            cparts = [self._cell(cell, depth) for cell in cells]
            dkey, dbuild = self._container(tuple(fn.__defaults__ or ()), depth)
            kkey, kbuild = self._container(dict(fn.__kwdefaults__ or {}), depth)
        finally:
            self.visiting.discard(id(fn))
        key = ("fn", code, tuple((n, k) for n, k, _ in gparts), tuple(k for k, _ in cparts), dkey, kkey)

        def build(it: Iterator[Any]) -> Any:
            scope = dict(globs)
            if "print" in _names(code) and "print" not in globs:
                scope["print"] = _print
            scope.update((n, b(it)) for n, _, b in gparts)
            closure = tuple(b(it) for _, b in cparts) or None
            new = types.FunctionType(code, scope, fn.__name__, dbuild(it) or None, closure)
            new.__kwdefaults__ = kbuild(it) or None
            new.__qualname__ = fn.__qualname__
            return new
        return key, build

    def _cell(self, cell: Any, depth: int) -> tuple[Hashable, Callable[[Iterator[Any]], Any]]:
        try:
            content = cell.cell_contents
        except ValueError:  # not yet assigned (a function that refers to itself before its definition ends)
            return "empty", lambda it: types.CellType()
        key, build = self.value(content, depth + 1)
        return key, lambda it: types.CellType(build(it))

    def _object(self, v: Any, depth: int) -> tuple[Hashable, Callable[[Iterator[Any]], Any]]:
        """Any other object: a pytree's leaves walked; else its identity and, as keys, the attributes code names."""
        leaves, treedef = jax.tree_util.tree_flatten(v)
        if treedef.num_nodes > 1 or (leaves and leaves[0] is not v):
            parts = [self.value(x, depth + 1) for x in leaves]
            return ("tree", treedef, tuple(k for k, _ in parts)), \
                lambda it: treedef.unflatten([b(it) for _, b in parts])
        used, stored, configured = _class_code(type(v))
        static = _Walk(Mode.STATIC, self.by_attributes)
        static.names, static.stored, static.visiting = self.names, self.stored, self.visiting
        parts = tuple((n, Identity(x) if type(x) in SINKS else static.value(x, depth + 1)[0])
                      for n, x in _attributes(v, (self.names | used) - self.stored - stored)
                      if not (self.by_attributes and type(x) in SINKS and n not in configured))
        return ("obj", type(v) if self.by_attributes else Identity(v), parts), lambda it: v

    names: frozenset[str] = frozenset()  # attribute names the lifted function's code uses anywhere
    stored: frozenset[str] = frozenset()  # attribute names it assigns (records it keeps, not what it reads)


def _attributes(v: Any, names: frozenset[str]) -> list[tuple[str, Any]]:
    """The data attributes of `v` among `names`, its own or its class's (a class default and the same value set
    on the instance are one key); methods and properties are code, not data."""
    own = getattr(v, "__dict__", None) or {}
    found = []
    for name in sorted(names):
        if name in own:
            found.append((name, own[name]))
            continue
        for klass in type(v).__mro__:
            if name in vars(klass):
                value = vars(klass)[name]
                if not (callable(value) or hasattr(value, "__get__")):
                    found.append((name, value))
                break
    return found


def _static(v: Any) -> Hashable:
    try:
        hash(v)
    except TypeError:
        return Identity(v)
    return (type(v), v) if not isinstance(v, (types.ModuleType, type)) else Identity(v)


def lift(fn: Callable[..., Any], mode: Mode = Mode.TRACED, by_attributes: bool = False) -> Lifted:
    """`fn`'s outside reads under `mode`: the program key, the argument leaves and how to rebuild `fn` on them.

    `by_attributes` (a key only, for code traced into someone else's program: an analysis's `analyze`): an object
    is keyed by its class and the attributes its code reads, not by its identity (a new view of the same analysis
    reuses the program); a list, dict or set attribute is a record it keeps (left out of the key) unless its
    class's `__init__` sets it (configuration: keyed by identity, so a new one assigned is seen)."""
    walk = _Walk(mode, by_attributes)
    base = getattr(fn, "func", fn)
    base = getattr(base, "__func__", base)
    code = getattr(base, "__code__", None) or getattr(vars(type(base)).get("__call__"), "__code__", None)
    if isinstance(code, types.CodeType):
        walk.names, walk.stored = _names(code), _stored(code)
    key, build = walk.value(fn, 0)

    def rebuild(it: Iterator[Any]) -> Any:
        walk.containers.clear()
        return build(it)
    return Lifted((int(mode), key), tuple(walk.leaves), rebuild, walk.containers)  # containers: filled by rebuild
