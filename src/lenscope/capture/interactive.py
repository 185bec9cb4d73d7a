"""Interactive programs: a forward with user hook functions, compiled once per meaning, answered without waiting.

Each call lifts the hook functions (lifted.py): what they read from outside their arguments becomes the
program's arguments (arrays, numbers) or its key (anything else), so a loop that makes a new `partial`, a new
lambda or changes a global per call reuses one program, and a changed value never meets a stale program.
A trace that needs a value concretely (a slice bound, an `if`) is retried with numbers, then arrays, in the key
(`Mode`); a hook that writes outside itself (a global, a list, a NumPy array, `print`) runs eagerly, op by op,
where every side effect happens as written.

A call whose program is not compiled yet (`Interactive(background=True)`) does not wait for XLA's optimizing
compile: the program compiles optimized on a background thread, and meanwhile the call is answered op by op
where the forward's operations are already compiled at that shape (after a warm-up, which starts in the
background when hooks first meet a shape), else by the same program compiled QUICK (XLA's backend
optimizations off: a third of the compile). Op by op from cold would compile every operation on its own, which
costs several times the whole program's compile (measured: bench/tutorial_loops.py).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax

from ..compile_options import QUICK
from ..errors import UsageError
from .lifted import Lifted, Mode, SideEffect, lift, writes_outside
from .specs import signature

__all__ = ["EAGER", "Interactive", "compiler", "eager_first", "is_traced"]

EAGER = 3  # past Mode.STATIC: the hooks run op by op, outside any program
IMMUTABLE = "do not support in-place item assignment"
MODES_KEPT = 1024  # the hooks whose mode moved past TRACED, most recent kept
SHAPES_KEPT = 64  # argument signatures whose eager forward is remembered as warm
PENDING = object()  # an executable being compiled on the compile thread


def eager_first() -> bool:
    """The default: a new program answers eagerly while it compiles, unless LENSCOPE_EAGER_FIRST=0."""
    return os.environ.get("LENSCOPE_EAGER_FIRST", "1") != "0"


def is_traced(tree: Any) -> bool:
    """Whether any leaf of `tree` is a tracer (the call is part of someone else's trace)."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(tree))


class Compiler:
    """One background thread that runs compile jobs in turn (`first=True`: ahead of those waiting); the process
    waits for the running one at exit."""

    def __init__(self) -> None:
        self._jobs: deque[Callable[[], None]] = deque()
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        self._running = 0
        self._stopped = False

    def submit(self, job: Callable[[], None], first: bool = False) -> None:
        with self._ready:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lenscope-compile", daemon=True)
                self._thread.start()
                threading._register_atexit(self.stop)  # before the interpreter's teardown, as concurrent.futures
            self._jobs.appendleft(job) if first else self._jobs.append(job)
            self._ready.notify_all()

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._jobs and not self._stopped:
                    self._ready.wait()
                if self._stopped:
                    return
                job = self._jobs.popleft()
                self._running += 1
            try:
                job()
            finally:
                with self._ready:
                    self._running -= 1
                    self._ready.notify_all()

    def wait(self) -> None:
        """Until every submitted job is done (tests, benchmarks)."""
        with self._ready:
            while self._jobs or self._running:
                self._ready.wait()

    def stop(self) -> None:
        """Drop what is queued and wait for the job running (XLA must not compile through the interpreter's exit)."""
        with self._ready:
            self._jobs.clear()
            self._stopped = True
            self._ready.notify_all()
            while self._running:
                self._ready.wait()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()


compiler = Compiler()  # the process's one compile thread (an explicit registry of pending programs)


@dataclass
class _Entry:
    """One program key's jitted function, its executables by argument signature (PENDING: being compiled) and
    the QUICK ones that answer until those are ready."""

    jitted: Any
    executables: dict[tuple, Any] = field(default_factory=dict)
    quick: dict[tuple, Any] = field(default_factory=dict)


class Interactive:
    """The kept programs of one forward with hooks: `call(make, hooks, args, context)` answers `make(hooks)(*args)`.

    `make(hooks)` builds the pure forward from hook functions; `args` is a tree of arrays; `context` is what else
    the program depends on (hashable). The `kept` most recent keys keep their programs. `background`: a program
    not compiled yet answers op by op or QUICK while it compiles (False: compile, then answer; None:
    `eager_first()`).
    """

    def __init__(self, kept: int = 8, background: bool | None = None) -> None:
        self.kept = kept
        self.background = eager_first() if background is None else background
        self._programs: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._modes: OrderedDict[Hashable, int] = OrderedDict()  # the mode each combination of hooks needs
        self._lock = threading.RLock()
        self._warm: set[tuple] = set()  # argument signatures whose eager forward has run: op by op is fast there
        self._warming: set[tuple] = set()
        self.compiles = 0  # optimized executables compiled (tests count them: a loop compiles once)
        self.quick_compiles = 0  # QUICK executables compiled for a call that waited
        self.eager_calls = 0  # calls answered op by op

    def call(self, make: Callable[[Sequence[Any]], Callable[..., Any]], hooks: Sequence[Callable[..., Any]],
             args: Any, context: Hashable = (), warmup: Callable[[], Any] | None = None,
             args_signature: tuple | None = None) -> Any:
        """`make(hooks)(*args)` through the program of what the hooks mean now (`warmup`: the eager forward
        without hooks, run in the background once hooks meet a shape; `args_signature`: `signature(args)` when the
        caller knows it, e.g. of a model's arrays it keeps, and then no leaf of `args` is a tracer)."""
        hooks = tuple(hooks)
        traced = [lift(fn) for fn in hooks]
        base = (context, tuple(lf.key for lf in traced))
        mode = self._modes.get(base, Mode.TRACED)
        if mode < EAGER and any(writes_outside(fn) for fn in hooks):
            mode = self._modes[base] = EAGER
        if args_signature is None and is_traced(args):  # inside someone's trace: the hooks are traced into it as is
            return make(hooks)(*args)
        if mode >= EAGER:
            return self._eager(make, hooks, args)
        lifts = traced if mode == Mode.TRACED else [lift(fn, Mode(mode)) for fn in hooks]
        key = (context, mode, tuple(lf.key for lf in lifts))
        leaves = tuple(lf.leaves for lf in lifts)
        entry = self._entry(key, make, lifts)
        shape = signature(args) if args_signature is None else args_signature
        sig = (shape, signature(leaves))
        ready = entry.executables.get(sig)
        if ready is not None and ready is not PENDING:
            return ready(args, leaves)
        if not self.background:
            if not self._compile(base, mode, entry, sig, args, leaves):
                return self.call(make, hooks, args, context, warmup, args_signature)  # the mode moved on
            return entry.executables[sig](args, leaves)
        self._in_background(base, mode, entry, sig, args, leaves)
        if shape in self._warm:  # the forward's operations are compiled: op by op answers at once
            return self._eager(make, hooks, args)
        quick = entry.quick.get(sig)
        if quick is None:
            if not self._compile(base, mode, entry, sig, args, leaves, quick=True):
                return self.call(make, hooks, args, context, warmup, args_signature)
            quick = entry.quick[sig]
        if hooks:
            self._warm_up(shape, warmup)
        return quick(args, leaves)

    def _in_background(self, base: Hashable, mode: int, entry: _Entry, sig: tuple, args: Any, leaves: tuple) -> None:
        """The optimized program compiled on the compile thread, once per key and signature."""
        with self._lock:
            if sig in entry.executables:
                return
            entry.executables[sig] = PENDING
        compiler.submit(lambda: self._compile(base, mode, entry, sig, args, leaves))

    def _warm_up(self, shape: tuple, warmup: Callable[[], Any] | None) -> None:
        """Hooks at a shape (a researcher trying them): the eager forward run once in the background, first in
        line, so that later new hooks at that shape answer op by op at once."""
        with self._lock:
            if warmup is None or shape in self._warming:
                return
            if len(self._warming) >= SHAPES_KEPT:  # a long run over many shapes: start over, never grow
                self._warming.clear()
                self._warm.clear()
            self._warming.add(shape)

        def warm() -> None:
            try:
                jax.block_until_ready(warmup())
            except Exception:  # a forward that fails eagerly is answered by its programs instead
                return
            with self._lock:
                self._warm.add(shape)
        compiler.submit(warm, first=True)

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
                entry = self._programs[key] = _Entry(jax.jit(program))
                while len(self._programs) > self.kept:
                    self._programs.popitem(last=False)
            self._programs.move_to_end(key)
            return entry

    def _compile(self, base: Hashable, mode: int, entry: _Entry, sig: tuple, args: Any, leaves: tuple,
                 quick: bool = False) -> bool:
        """Compile one executable (`quick`: with QUICK options, for the call that waits); a trace that needs
        concrete values moves the hooks to the next mode instead."""
        try:
            executable = entry.jitted.lower(args, leaves).compile(dict(QUICK) if quick else None)
        except Exception as err:  # the hooks need values concretely, or write outside: the next mode, or eagerly
            effect = isinstance(err, SideEffect) or (isinstance(err, TypeError) and IMMUTABLE in str(err))
            with self._lock:
                if not quick:
                    entry.executables.pop(sig, None)
                self._modes[base] = max(self._modes.get(base, 0), EAGER if effect else mode + 1)
                while len(self._modes) > MODES_KEPT:
                    self._modes.popitem(last=False)
            return False
        with self._lock:
            if quick:
                entry.quick[sig] = executable
                self.quick_compiles += 1
            else:
                entry.executables[sig] = executable
                entry.quick.pop(sig, None)
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
