"""Where an analysis reads its state and node: its own (a standalone analysis) or a trainer's (a borrowed view).

Every analysis is given one holder when it is made: `AnalysisBase(...)` makes an `OwnState`, and
`from_trainer()` a `Borrowed` on that trainer. `analysis.state` and `analysis.lineage` read it, nothing else.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..training import BaseTrainer
from ..training.lineage import Lineage


class OwnState:
    """A standalone analysis's state and node, set by its own setup()."""

    trainer: BaseTrainer | None = None  # not borrowed

    def __init__(self) -> None:
        self.state: Any = None
        self.lineage: Lineage | None = None
        self._pinned: Lineage | None = None

    def current_lineage(self) -> Lineage | None:
        """The lineage results go to."""
        return self._pinned or self.lineage

    @contextlib.contextmanager
    def pinned(self, lineage: Lineage | None) -> Iterator[None]:
        """Results go to `lineage` for the duration (None: no change)."""
        previous, self._pinned = self._pinned, lineage or self._pinned
        try:
            yield
        finally:
            self._pinned = previous


class Borrowed(OwnState):
    """A view's state and node: always the trainer's current ones; its results go to `results` when given
    (AnalysisCfg.output_store), and while a tandem view concludes, to the node its results were computed on.

    The pin is set on the publisher's thread only between two validations, while the training thread does
    not use the view (the publisher runs at most one validation behind and `open()` waits for it).
    """

    def __init__(self, trainer: BaseTrainer, results: Lineage | None = None) -> None:
        super().__init__()
        self.trainer = trainer
        self.lineage = results

    @property
    def state(self) -> Any:
        """The trainer's current state."""
        return self.trainer.state

    @state.setter
    def state(self, value: Any) -> None:
        if value is not None:
            raise RuntimeError(f"the analysis is a borrowed view: the trainer alone replaces its state "
                               f"({type(self.trainer).__name__}.state)")

    def current_lineage(self) -> Lineage | None:
        """The pinned lineage, else where results are sent, else the trainer's."""
        return self._pinned or self.lineage or self.trainer.lineage
