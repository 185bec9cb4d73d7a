"""Tandem analyses (A9): checked at trainer construction, scheduled at validation cadence through small protocols.

The scheduler knows analyses only as `TandemAnalysis` (a class in `ANALYSIS`) and `TandemView`
(the borrowed view it makes); it never imports the analysis layer. Views hand the slow half of
their work (figures, files, `on_analysis_end`) to the `Publisher`, which runs it on a background
thread against the node the results were computed on.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..config import schema
from ..errors import ConfigError
from ..files import check_plain_name
from ..store import Node, Store
from .lineage import Lineage, Mode, open_lineage

log = logging.getLogger("lenscope.tandem")

Work = Callable[[Lineage], None]


class TandemView(Protocol):
    """A borrowed view on the trainer: runs on its current state and node, never ticks."""

    NAME: ClassVar[str]

    def run(self) -> Any:
        """The analysis's run(), called once per validation; deferred publishing goes to the view's publisher."""

    def warm(self) -> Sequence[Callable[[], Any]]:
        """Ahead-of-time work (compiling, loading the plotting stack), prepared now and run on a background thread."""


@runtime_checkable
class TandemAnalysis(Protocol):
    """What an `ANALYSIS` entry is: a class with a plain NAME, the CONFIG it reads, and a borrowed-view factory."""

    NAME: ClassVar[str]
    CONFIG: ClassVar[type]

    def from_trainer(self, trainer: Any, *, publisher: Publisher | None = None) -> TandemView:
        """A borrowed view on `trainer` (a classmethod), publishing through `publisher` when given."""


def check_analyses(trainer_cls: type, analyses: Sequence[type]) -> None:
    """Distinct NAMEs, and every config path an analysis reads present in the trainer's CONFIG."""
    seen: dict[str, type] = {}
    have = schema(trainer_cls.CONFIG).by_path
    for cls in analyses:
        if not isinstance(cls, TandemAnalysis):
            raise ConfigError(f"{trainer_cls.__name__}.ANALYSIS holds {cls!r}, which is not an analysis "
                              "(an AnalysisBase subclass)")
        name = cls.NAME
        check_plain_name(name, f"{trainer_cls.__name__}.ANALYSIS: {cls.__name__}.NAME", ConfigError)
        if name in seen:
            raise ConfigError(f"{trainer_cls.__name__}.ANALYSIS: {seen[name].__name__} and {cls.__name__} share "
                              f"NAME {name!r}; distinct analyses on one node need distinct names")
        seen[name] = cls
        for spec in schema(cls.CONFIG).fields:
            if spec.path not in have:
                raise ConfigError(
                    f"{trainer_cls.__name__}.CONFIG lacks {spec.path!r}, read by tandem analysis {cls.__name__}; "
                    f"compose it explicitly: @dataclass class ...({trainer_cls.CONFIG.__name__}, {spec.owner.__name__})"
                )


class Publisher:
    """One background thread for tandem work, at most one validation behind the training loop.

    During a validation (`open(node)` ... `close()`) views `defer` their publishing; each piece of work
    later receives the lineage of the node its results were computed on. A failure is logged and
    recorded on that node (a value and an error artifact). When strict, deferred work runs at once
    in the training thread and its errors propagate.
    """

    def __init__(self, store: Store, *, writer: bool) -> None:
        self.store, self.writer = store, writer
        self._node: Node | None = None
        self._strict = False
        self._jobs: list[tuple[str, Work]] = []
        self._thread: threading.Thread | None = None

    def open(self, node: Node, *, strict: bool) -> None:
        """Start collecting one validation's work, computed on `node` (after the previous validation's is done)."""
        self.wait()
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

    def start(self, target: Callable[..., None], args: tuple, name: str) -> None:
        """Run `target(*args)` on the background thread, once the work before it is done."""
        self.wait()
        self._thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Block until the background work (ahead-of-time compiles, the last validation's files) is done."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def record(self, name: str, node: Node, err: Exception) -> None:
        """Log analysis `name`'s failure with its traceback and record it on `node` (a value and an error artifact)."""
        text = "".join(traceback.format_exception(err))
        log.error("tandem analysis %s failed at %s:\n%s", name, node, text)
        if self.writer:
            self.store.record(node, {f"tandem/{name}/error": f"{type(err).__name__}: {err}"})
            self.store.put_artifact(node, f"{name}.error", f"{name}.error.txt", text.encode())

    def _lineage(self, node: Node) -> Lineage:
        return open_lineage(self.store, Mode.ATTACH, node, writer=self.writer)

    def _publish(self, jobs: list[tuple[str, Work]], node: Node) -> None:
        lineage = self._lineage(node)
        for name, work in jobs:
            try:
                work(lineage)
            except Exception as err:  # noqa: BLE001  (recorded on the node: a figure never stops training)
                self.record(name, node, err)


class Tandem:
    """The scheduler: the borrowed views of one trainer, made once so each keeps its compiled function.

    At each validation it calls every view's `run()` in the training thread (the state is read at
    the right step; multi-process gathers stay in order); the views defer plotting and saving to the
    publisher. `warm()` starts each view's ahead-of-time work on the publisher's thread as training
    starts, while the training step compiles.
    """

    def __init__(self, trainer: Any, analyses: Sequence[TandemAnalysis]) -> None:
        self.trainer = trainer
        self.analyses = list(analyses)
        self.publisher = Publisher(trainer.store, writer=trainer.is_writer)
        self._views: list[TandemView] | None = None

    @property
    def views(self) -> list[TandemView]:
        """One borrowed view per declared analysis."""
        if self._views is None:
            self._views = [cls.from_trainer(self.trainer, publisher=self.publisher) for cls in self.analyses]
        return self._views

    def warm(self) -> None:
        """Prepare each view's ahead-of-time work here and run it on the background thread: validations do not wait."""
        if not (self.analyses and self.trainer.args.analyze) or self._views is not None:
            return
        work: list[tuple[str, Callable[[], Any]]] = []
        for view in self.views:
            try:
                work.extend((view.NAME, item) for item in view.warm())
            except Exception:  # the first validation repeats this in the training loop and reports the error there
                log.debug("tandem analysis %s not prepared ahead", view.NAME, exc_info=True)
        if work:
            self.publisher.start(_ahead, (work,), "lenscope-tandem-compile")

    def run(self, strict: bool) -> None:
        """Run every view on the trainer's current state and node; record failures unless strict."""
        node = self.trainer.lineage.flush()
        self.publisher.open(node, strict=strict)
        try:
            for view in self.views:
                try:
                    view.run()
                except Exception as err:
                    if strict:
                        raise
                    self.publisher.record(view.NAME, node, err)
        finally:
            self.publisher.close()

    def wait(self) -> None:
        """Block until the ahead-of-time work or the last validation's figures and files are done."""
        self.publisher.wait()


def _ahead(work: list[tuple[str, Callable[[], Any]]]) -> None:
    """On the background thread: each view's ahead-of-time work; a failure only means the first validation does it."""
    for name, item in work:
        try:
            item()
        except Exception:
            log.debug("tandem: ahead-of-time work of %s failed", name, exc_info=True)
