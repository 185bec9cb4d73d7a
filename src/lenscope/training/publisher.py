"""The tandem publisher: one background thread saving each validation's figures and files, at most one behind.

Views `defer` the slow half of their work (plots, files, `on_analysis_end`); each piece of work later
receives the lineage of the node its results were computed on. Every write of that work passes the
publisher's gate, so on an interrupt `stop()` can let it finish for a moment and then abandon the rest
cleanly: a file and its artifact are saved together or not at all, and nothing is written after.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..store import Node, Store
from .interrupts import shielded
from .lineage import Lineage, Mode, open_lineage

log = logging.getLogger("lenscope.tandem")

Work = Callable[[Lineage], None]
STOP_GRACE_S = 2.0  # how long an interrupted run lets the publisher finish what it was handed


class Abandoned(Exception):
    """Raised at the gate of work that starts writing after the publisher was stopped; the work is dropped."""


@dataclass
class Failures:
    """The failures of one tandem analysis during a run: how many, where first and last, the last error."""

    count: int
    first: Node
    last: Node
    error: str


def one_line(err: BaseException) -> str:
    """`Type: first line of the message`: how a repeated failure is shown and recorded."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


class Publisher:
    """One background thread for tandem work, at most one validation behind the training loop.

    During a validation (`open(node)` ... `close()`) views `defer` their publishing. A failure is
    logged (the traceback the first time per analysis, one line after) and recorded on the node it
    belongs to (a value and an error artifact). When strict, deferred work runs at once in the
    training thread and its errors propagate.
    """

    def __init__(self, store: Store, *, writer: bool, deadline: float = 0.0) -> None:
        self.store, self.writer = store, writer
        self.deadline = deadline  # seconds the background work may take before it is abandoned; 0: no limit
        self.failures: dict[str, Failures] = {}
        self._node: Node | None = None
        self._strict = False
        self._jobs: list[tuple[str, Work]] = []
        self._thread: threading.Thread | None = None
        self._abandoned: threading.Thread | None = None  # the thread left running by stop()
        self._gate = threading.RLock()
        self._stopped = threading.Event()
        self._failures_lock = threading.Lock()
        self._generation = 0  # bumped when work is abandoned: the abandoned thread's later writes are refused
        self._started = 0.0
        self._doing: tuple[str, Node] | None = None  # the work item running on the thread (analysis, node)
        self._rest: list[tuple[str, Work]] = []  # the work queued behind it

    def open(self, node: Node, *, strict: bool) -> None:
        """Start collecting one validation's work, computed on `node` (after the previous validation's is done)."""
        self.wait()
        if self._stopped.is_set():  # a run after an interrupted one: the abandoned work ends (unable to write) first
            if self._abandoned is not None:
                self._abandoned.join()
            self._abandoned = None
            self._stopped.clear()
        self._node, self._strict, self._jobs = node, strict, []

    def defer(self, name: str, work: Work) -> None:
        """Run `work(lineage)` for analysis `name` on the open validation's node: later, or now when strict."""
        if self._node is None:
            raise RuntimeError(f"tandem analysis {name} deferred work outside a validation")
        if self._strict:
            work(self._lineage(self._node))
        else:
            self._jobs.append((name, work))

    def close(self) -> None:
        """Hand the collected work to the background thread."""
        jobs, node, self._jobs, self._node = self._jobs, self._node, [], None
        if jobs and node is not None:
            self.start(self._publish, (jobs, node), "lenscope-tandem")

    def discard(self) -> None:
        """Drop the open validation's collected work (the run is being interrupted)."""
        self._jobs, self._node = [], None

    def start(self, target: Callable[..., None], args: tuple, name: str) -> None:
        """Run `target(*args)` on the background thread, once the work before it is done."""
        self.wait()
        if self._stopped.is_set():
            return
        self._thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._started = time.monotonic()
        self._thread.start()

    def wait(self) -> None:
        """Block until the background work (ahead-of-time compiles, the last validation's files) is done.

        After `stop()` it returns at once: the work left can no longer write. Work still running
        `deadline` seconds after it started is abandoned with one line, and training goes on.
        """
        while self._thread is not None and not self._stopped.is_set():
            left = None if self.deadline <= 0 else max(0.0, self._started + self.deadline - time.monotonic())
            self._thread.join(left)
            thread, self._thread = self._thread, None
            if thread.is_alive():
                self._abandon()

    def _abandon(self) -> None:
        """Give up on the running work: it may never write again; the failure is recorded like any other.

        The work queued behind it in the same validation runs on a fresh thread, with its own deadline.
        """
        with self._gate:  # a write in progress ends first; every later write of that thread is refused
            self._generation += 1
        doing, rest, self._rest = self._doing, self._rest, []
        if doing is None:
            log.error("tandem: ahead-of-time work did not finish within %gs (training/analysis_deadline): "
                      "abandoned; training goes on", self.deadline)
            return
        name, node = doing
        self.record(name, node, TimeoutError(
            f"did not finish within {self.deadline:g}s (training/analysis_deadline): abandoned; training goes on"),
            trace=False)
        if rest:
            self.start(self._publish, (rest, node), "lenscope-tandem")

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """On an interrupt: let the handed-over work finish for up to `grace` seconds, then abandon the rest.

        Work that has not started writing by then never does (its file and artifact are both left
        out); a write in progress completes before this returns.
        """
        self.discard()
        if self._thread is not None:
            self._thread.join(grace)
        self._stopped.set()
        with self._gate:  # a write in progress ends here; every later one meets the stopped gate
            pass
        self._abandoned, self._thread = self._thread, None

    @contextlib.contextmanager
    def gate(self, generation: int | None = None) -> Iterator[None]:
        """Where deferred work writes: refused (Abandoned) once stopped or abandoned; held from signals in a write."""
        with self._gate, shielded():
            if self._stopped.is_set():
                raise Abandoned("the run was interrupted")
            if generation is not None and generation != self._generation:
                raise Abandoned("the work ran past its deadline")
            yield

    def record(self, name: str, node: Node, err: Exception, *, trace: bool = True,
               generation: int | None = None) -> None:
        """Report analysis `name`'s failure and record it on `node` (a value `tandem/NAME/error`, an error artifact).

        The first failure of an analysis is logged with its traceback (unless `trace` is false: one
        line), later ones in one line each.
        """
        text = "".join(traceback.format_exception(err)) if trace else f"{one_line(err)}\n"
        with self._failures_lock:
            seen = self.failures.get(name)
            if seen is None:
                self.failures[name] = Failures(1, node, node, one_line(err))
            else:
                seen.count, seen.last, seen.error = seen.count + 1, node, one_line(err)
        if seen is None and trace:
            log.error("tandem analysis %s failed at %s (training goes on; a later failure is one line, "
                      "each traceback is on its node as artifact %s.error):\n%s", name, node, name, text)
        elif seen is None:
            log.error("tandem analysis %s failed at %s: %s", name, node, one_line(err))
        else:
            log.error("tandem analysis %s failed again at %s: %s", name, node, one_line(err))
        if self.writer:
            try:
                with self.gate(generation):
                    self.store.record(node, {f"tandem/{name}/error": one_line(err)})
                    self.store.put_artifact(node, f"{name}.error", f"{name}.error.txt", text.encode())
            except Abandoned:
                pass
            except Exception as failed:  # noqa: BLE001  (a full disk: said in one line, never a thread's traceback)
                log.error("tandem analysis %s: its failure could not be recorded on %s: %s", name, node,
                          one_line(failed))

    def summary(self, validations: int) -> str | None:
        """One line naming every analysis that failed during the run (None when none did)."""
        if not self.failures:
            return None
        parts = [f"{name} at {f.count} of {validations} validations (first {f.first}, last {f.last}: {f.error})"
                 for name, f in sorted(self.failures.items())]
        names = ", ".join(f"{name}.error" for name in sorted(self.failures))
        return (f"tandem analyses failed during this run: {'; '.join(parts)}. "
                f"Tracebacks: `lenscope ls --artifact NAME.error` ({names})")

    def _lineage(self, node: Node, generation: int | None = None) -> Lineage:
        lineage = open_lineage(self.store, Mode.ATTACH, node, writer=self.writer)
        lineage.guard = lambda: self.gate(generation)
        return lineage

    def _publish(self, jobs: list[tuple[str, Work]], node: Node) -> None:
        generation = self._generation
        lineage = self._lineage(node, generation)
        for index, (name, work) in enumerate(jobs):
            if self._stopped.is_set() or generation != self._generation:
                return
            self._doing, self._rest = (name, node), jobs[index + 1:]
            try:
                work(lineage)
            except Abandoned:
                return
            except Exception as err:  # noqa: BLE001  (recorded on the node: a figure never stops training)
                self.record(name, node, err, generation=generation)
            finally:
                if generation == self._generation:
                    self._doing, self._rest = None, []
