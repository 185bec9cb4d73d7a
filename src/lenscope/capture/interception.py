"""Method interception for libraries that have none (Flax NNX, Equinox): `__call__` wrapped while a trace runs.

While at least one thread intercepts, the `__call__` of every subclass of the library's module base
is replaced by a wrapper; when the last one leaves, the originals are put back. The wrapper reports a
call only to the interceptors of its own thread, so other threads (training on the main thread while a
tandem analysis compiles on another) call straight through. Interception happens while JAX traces, so
a compiled function holds no trace of it: nothing runs per call at run time. Flax NNX patches methods
the same way for `nnx.capture(..., method_outputs=...)`.

A module's path is its place in the first module called at the top level of the forward (the root,
path ''), found by walking that root once: attribute names and list indices joined with '/'.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .backend import Interceptor, ModuleCall

__all__ = ["ClassInterception"]

Places = Callable[[Any], Iterable[tuple[str, Any]]]  # root module -> (path, module) for it and every submodule


def _subclasses(base: type) -> list[type]:
    """`base` and every subclass defined so far, each once."""
    seen: dict[type, None] = {}
    pending = [base]
    while pending:
        cls = pending.pop()
        if cls not in seen:
            seen[cls] = None
            pending.extend(cls.__subclasses__())
    return list(seen)


class _ThreadState(threading.local):
    """One thread's interceptors (innermost last), running modules, and module places by id."""

    def __init__(self) -> None:
        self.handlers: list[Interceptor] = []
        self.running: list[Any] = []
        self.places: dict[int, tuple[Any, str]] = {}


class ClassInterception:
    """Intercepts `__call__` of every subclass of `base`, reporting each call with the module's path."""

    def __init__(self, base: type, places: Places) -> None:
        self.base, self.places = base, places
        self._lock = threading.Lock()
        self._users = 0
        self._originals: dict[type, Callable[..., Any]] = {}
        self._thread = _ThreadState()

    @contextlib.contextmanager
    def intercept(self, on_call: Interceptor, root: Any = None) -> Iterator[None]:
        """Report this thread's module calls to on_call while the block runs (the latest interceptor first);
        `root`: the module whose places name the paths, when the forward does not start with its `__call__`."""
        state = self._thread
        if root is not None and not state.handlers:
            for path, child in self.places(root):
                state.places.setdefault(id(child), (child, path))
        state.handlers.append(on_call)
        self._acquire()
        try:
            yield
        finally:
            state.handlers.pop()
            if not state.handlers:
                state.places, state.running = {}, []
            self._release()

    def _acquire(self) -> None:
        with self._lock:
            self._users += 1
            if self._users == 1:
                for cls in _subclasses(self.base):
                    method = vars(cls).get("__call__")
                    if inspect.isfunction(method):
                        self._originals[cls] = method
                        type.__setattr__(cls, "__call__", self._wrap(method))

    def _release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                originals, self._originals = self._originals, {}
                for cls, method in originals.items():
                    type.__setattr__(cls, "__call__", method)

    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        interception = self

        @functools.wraps(original)
        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            return interception._called(original, module, args, kwargs)

        return __call__

    def _called(self, original: Callable[..., Any], module: Any, args: tuple, kwargs: dict) -> Any:
        state = self._thread
        if not state.handlers or (state.running and state.running[-1] is module):
            # No interceptor in this thread, or a super().__call__ of the module already being reported.
            return original(module, *args, **kwargs)
        call = ModuleCall(module, "__call__", self._path(module), types.MethodType(original, module), args, kwargs)
        handlers = list(state.handlers)

        def run(level: int, given: tuple, named: dict) -> Any:
            if level < 0:
                state.running.append(module)
                try:
                    return original(module, *given, **named)
                finally:
                    state.running.pop()

            def proceed(new_args: tuple | None = None, new_kwargs: dict | None = None) -> Any:
                return run(level - 1, given if new_args is None else new_args,
                           named if new_kwargs is None else new_kwargs)

            return handlers[level](call, proceed)

        return run(len(handlers) - 1, args, kwargs)

    def _path(self, module: Any) -> str | None:
        """The module's path: known from an earlier root, or '' as a new root; None if made inside a forward."""
        places = self._thread.places
        known = places.get(id(module))
        if known is not None:
            return known[1]
        if self._thread.running:
            return None
        for path, child in self.places(module):
            places.setdefault(id(child), (child, path))  # the module is kept: its id cannot be reused meanwhile
        return places[id(module)][1]
