"""Tandem analyses (A9): checked at trainer construction, scheduled at validation cadence through small protocols.

The scheduler knows analyses only as `TandemAnalysis` (a class in `ANALYSIS`) and `TandemView`
(the borrowed view it makes); it never imports the analysis layer. Views hand the slow half of
their work (figures, files, `on_analysis_end`) to the `Publisher`, which runs it on a background
thread against the node the results were computed on (training/publisher.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..config import schema
from ..errors import ConfigError
from ..files import check_plain_name
from .publisher import Publisher

log = logging.getLogger("lenscope.tandem")


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
        self.publisher = Publisher(trainer.store, writer=trainer.is_writer,
                                   deadline=trainer.args.analysis_deadline)
        self.validations = 0
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
        self.validations += 1
        try:
            for view in self.views:
                try:
                    view.run()
                except Exception as err:
                    if strict:
                        raise
                    self.publisher.record(view.NAME, node, err)
        except KeyboardInterrupt:
            self.publisher.discard()  # an interrupted validation hands nothing over
            raise
        finally:
            self.publisher.close()

    def wait(self) -> None:
        """Block until the ahead-of-time work or the last validation's figures and files are done."""
        self.publisher.wait()

    def stop(self) -> None:
        """On an interrupt: give the publisher a moment to finish, then abandon what it has not started writing."""
        self.publisher.stop()

    def report(self) -> None:
        """Log one line naming the analyses that failed during the run, if any did."""
        summary = self.publisher.summary(self.validations)
        if summary is not None:
            log.error("%s", summary)


def _ahead(work: list[tuple[str, Callable[[], Any]]]) -> None:
    """On the background thread: each view's ahead-of-time work; a failure only means the first validation does it."""
    for name, item in work:
        try:
            item()
        except Exception:
            log.debug("tandem: ahead-of-time work of %s failed", name, exc_info=True)
