"""Interactive programs: a forward with user hook functions, compiled once per meaning, answered without waiting.

Each call lifts the hook functions (lifted.py): what they read from outside their arguments becomes the
program's arguments (arrays, numbers) or its key (anything else), so a loop that makes a new `partial`, a new
lambda or changes a global per call reuses one program, and a changed value never meets a stale program.
A trace that needs a value concretely (a slice bound, an `if`) is retried with numbers, then arrays, in the key
(`Mode`); a hook that writes outside itself (a global, a list, a NumPy array, `print`) runs eagerly, op by op,
where every side effect happens as written. A program not yet compiled answers eagerly while it compiles on a
background thread (`Interactive(background=True)`), so the first call of a new hook does not wait for XLA.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import jax

from ..errors import UsageError
from .lifted import Lifted, Mode, SideEffect, lift, writes_outside
from .specs import signature

__all__ = ["EAGER", "Interactive", "compiler", "eager_first", "is_traced"]

EAGER = 3  # past Mode.STATIC: the hooks run op by op, outside any program
IMMUTABLE = "do not support in-place item assignment"
MODES_KEPT = 1024  # the hooks whose mode moved past TRACED, most recent kept


def eager_first() -> bool:
    """The default: a new program answers eagerly while it compiles, unless LENSCOPE_EAGER_FIRST=0."""
    return os.environ.get("LENSCOPE_EAGER_FIRST", "1") != "0"


def is_traced(tree: Any) -> bool:
    """Whether any leaf of `tree` is a tracer (the call is part of someone else's trace)."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(tree))


class Compiler:
    """One background thread that compiles programs in turn; the process waits for the running one at exit."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._busy = threading.Lock()
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lenscope-compile", daemon=True)
                self._thread.start()
                atexit.register(self.stop)
        self._jobs.put(job)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            with self._busy:
                job()
            self._jobs.task_done()

    def wait(self) -> None:
        """Until every submitted program is compiled (tests, benchmarks)."""
        self._jobs.join()

    def stop(self) -> None:
        """Drop what is queued and wait for the program being compiled (XLA must not compile through teardown)."""
        while True:
            try:
                self._jobs.get_nowait()
                self._jobs.task_done()
            except queue.Empty:
                break
        self._jobs.put(None)
        with self._busy:
            pass


compiler = Compiler()  # the process's one compile thread (an explicit registry of pending programs)


@dataclass
class _Entry:
    """One program key's jitted function and its executables by argument signature (None: being compiled)."""

    jitted: Any
    executables: dict[tuple, Any]


class Interactive:
    """The kept programs of one forward with hooks: `call(make, hooks, args, context)` answers `make(hooks)(*args)`.

    `make(hooks)` builds the pure forward from hook functions; `args` is a tree of arrays; `context` is what else
    the program depends on (hashable). The `kept` most recent keys keep their programs. `background`: a program
    not compiled yet answers eagerly while it compiles (False: compile, then answer; None: `eager_first()`).
    """

    def __init__(self, kept: int = 8, background: bool | None = None) -> None:
        self.kept = kept
        self.background = eager_first() if background is None else background
        self._programs: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._modes: OrderedDict[Hashable, int] = OrderedDict()  # the mode each combination of hooks needs
        self._lock = threading.RLock()
        self.compiles = 0  # executables compiled (tests count them: a loop compiles once)
        self.eager_calls = 0  # calls answered op by op

    def call(self, make: Callable[[Sequence[Any]], Callable[..., Any]], hooks: Sequence[Callable[..., Any]],
             args: Any, context: Hashable = ()) -> Any:
        hooks = tuple(hooks)
        traced = [lift(fn) for fn in hooks]
        base = (context, tuple(lf.key for lf in traced))
        mode = self._modes.get(base, Mode.TRACED)
        if mode < EAGER and any(writes_outside(fn) for fn in hooks):
            mode = self._modes[base] = EAGER
        if is_traced(args):  # inside someone's trace: the hooks are traced into it as they are
            return make(hooks)(*args)
        if mode >= EAGER:
            return self._eager(make, hooks, args)
        lifts = traced if mode == Mode.TRACED else [lift(fn, Mode(mode)) for fn in hooks]
        key = (context, mode, tuple(lf.key for lf in lifts))
        leaves = tuple(lf.leaves for lf in lifts)
        entry = self._entry(key, make, lifts)
        sig = signature((args, leaves))
        with self._lock:
            ready = entry.executables.get(sig, False)
            if ready is False and self.background:
                entry.executables[sig] = None
                compiler.submit(lambda: self._compile(base, mode, entry, sig, args, leaves))
        if ready is False and not self.background:
            if not self._compile(base, mode, entry, sig, args, leaves):
                return self.call(make, hooks, args, context)  # the mode moved on: the same call in the next one
            ready = entry.executables[sig]
        if not ready:
            return self._eager(make, hooks, args)
        return ready(args, leaves)

    def _entry(self, key: Hashable, make: Callable[..., Any], lifts: list[Lifted]) -> _Entry:
        with self._lock:
            entry = self._programs.get(key)
            if entry is None:
                def program(args: Any, leaves: tuple) -> Any:
                    rebuilt = [lf.rebuild(own) for lf, own in zip(lifts, leaves)]
                    out = make(rebuilt)(*args)
                    for lf in lifts:
                        _check_untouched(lf)
                    return out
                entry = self._programs[key] = _Entry(jax.jit(program), {})
                while len(self._programs) > self.kept:
                    self._programs.popitem(last=False)
            self._programs.move_to_end(key)
            return entry

    def _compile(self, base: Hashable, mode: int, entry: _Entry, sig: tuple, args: Any, leaves: tuple) -> bool:
        """Compile one executable; a trace that needs concrete values moves the hooks to the next mode instead."""
        try:
            executable = entry.jitted.lower(args, leaves).compile()
        except Exception as err:  # the hooks need values concretely, or write outside: the next mode, or eagerly
            effect = isinstance(err, SideEffect) or (isinstance(err, TypeError) and IMMUTABLE in str(err))
            with self._lock:
                entry.executables.pop(sig, None)
                self._modes[base] = max(self._modes.get(base, 0), EAGER if effect else mode + 1)
                while len(self._modes) > MODES_KEPT:
                    self._modes.popitem(last=False)
            return False
        with self._lock:
            entry.executables[sig] = executable
            self.compiles += 1
        return True

    def _eager(self, make: Callable[[Sequence[Any]], Callable[..., Any]], hooks: tuple, args: Any) -> Any:
        self.eager_calls += 1
        try:
            return make(hooks)(*args)
        except TypeError as err:
            if IMMUTABLE in str(err):
                raise UsageError(f"a hook assigned into an activation in place ({err}); a hook returns the new "
                                 "activation: `return x.at[:, :, head].set(0)` instead of `x[:, :, head] = 0`") \
                    from err
            raise

    def wait(self) -> None:
        """Until the programs being compiled in the background are ready."""
        compiler.wait()


def _check_untouched(lifted: Lifted) -> None:
    """A list or dict a hook read, changed during the trace (an append): the hooks must run eagerly."""
    for container, size in lifted.containers:
        if len(container) != size:
            raise SideEffect("a hook changed a list or dict it reads from outside")
