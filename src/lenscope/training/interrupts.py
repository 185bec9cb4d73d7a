"""Stopping a job on SIGINT or SIGTERM at a safe point.

While `on_signals()` is active, either signal raises `Interrupted` in the main thread, except inside a
`shielded()` section (a store write, a file written together with its artifact, a checkpoint handed to
Orbax): there the signal is held and raised as the section ends, so nothing is left half-written. Once a
job is stopping, a second signal only says so; a third exits at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_CODE = 130  # what `lenscope` returns for an interrupted job, whichever signal stopped it


class Interrupted(KeyboardInterrupt):
    """The job was stopped by SIGINT or SIGTERM; its node is marked failed with the error `interrupted`."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        self.signal = signal.Signals(signum).name
        super().__init__(f"interrupted by {self.signal}")

    def __str__(self) -> str:
        return f"interrupted by {self.signal}"


def describe(error: BaseException) -> str:
    """The error text a failed node records: `interrupted` for Ctrl-C or SIGTERM, else the error's repr."""
    return "interrupted" if isinstance(error, KeyboardInterrupt) else repr(error)


class _Signals:
    """The process's one handler state (signals reach the main thread only)."""

    def __init__(self) -> None:
        self.installed = False
        self.depth = 0  # shielded sections open in the main thread
        self.pending: int | None = None  # a signal held until the sections end
        self.stopping = 0  # signals received since the job started stopping
        self.signum = signal.SIGINT  # the signal that started it

    def handle(self, signum: int, _frame) -> None:
        if self.stopping:
            self.stopping += 1
            if self.stopping > 2:
                print("lenscope: interrupted again: exiting at once", file=sys.stderr, flush=True)
                os._exit(EXIT_CODE)
            print("lenscope: stopping: finishing the writes in progress (interrupt again to exit at once)",
                  file=sys.stderr, flush=True)
        elif self.depth:
            self.pending = signum
        else:
            self.stopping, self.signum = 1, signum
            raise Interrupted(signum)

    def deliver(self) -> None:
        signum, self.pending = self.pending, None
        if signum is not None and not self.stopping:
            self.stopping, self.signum = 1, signum
            raise Interrupted(signum)


_STATE = _Signals()


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _quiet_unraisable(previous):
    """An unraisable hook that drops our own `Interrupted`: raised inside a GC callback or a finalizer it
    cannot propagate, `check()` raises it again at the next step, so Python's traceback would only alarm."""

    def hook(unraisable) -> None:
        if not isinstance(unraisable.exc_value, Interrupted):
            previous(unraisable)

    return hook


@contextlib.contextmanager
def on_signals() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into `Interrupted` for the duration (main thread only; nested use is a no-op)."""
    if _STATE.installed or not _in_main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _STATE.handle) for signum in SIGNALS}
    unraisable, sys.unraisablehook = sys.unraisablehook, _quiet_unraisable(sys.unraisablehook)
    _STATE.installed, _STATE.stopping, _STATE.pending = True, 0, None
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sys.unraisablehook = unraisable
        _STATE.installed, _STATE.stopping, _STATE.pending = False, 0, None


def check() -> None:
    """Raise `Interrupted` if a signal arrived: the loop calls it each step, because a signal that lands in a
    finalizer or a garbage-collection callback raises there, where Python prints and swallows the exception."""
    if _STATE.installed and _STATE.stopping and _in_main_thread() and not _STATE.depth:
        raise Interrupted(_STATE.signum)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block ends, so a bounded write completes (main thread; elsewhere a no-op)."""
    if not _in_main_thread():
        yield
        return
    _STATE.depth += 1
    try:
        yield
    finally:
        _STATE.depth -= 1
        if not _STATE.depth:
            _STATE.deliver()
