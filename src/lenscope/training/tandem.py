"""Tandem analyses: checked at trainer construction, run as borrowed views at validation cadence (A9)."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Sequence
from typing import Any

from ..config import schema
from ..errors import ConfigError

log = logging.getLogger("lenscope.tandem")


def check_analyses(trainer_cls: type, analyses: Sequence[type]) -> None:
    """Distinct NAMEs, and every config path an analysis reads present in the trainer's CONFIG."""
    seen: dict[str, type] = {}
    have = schema(trainer_cls.CONFIG).by_path
    for cls in analyses:
        name = getattr(cls, "NAME", "")
        if not hasattr(cls, "from_trainer"):
            raise ConfigError(f"{trainer_cls.__name__}.ANALYSIS holds {cls!r}, which is not an AnalysisBase subclass")
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
    """The borrowed views of one trainer, created once so each keeps its compiled function."""

    def __init__(self, trainer: Any, analyses: Sequence[type]) -> None:
        self.trainer = trainer
        self.analyses = list(analyses)
        self._views: list[Any] | None = None

    @property
    def views(self) -> list[Any]:
        """One borrowed view per declared analysis."""
        if self._views is None:
            self._views = [cls.from_trainer(self.trainer) for cls in self.analyses]
        return self._views

    def run(self, strict: bool) -> None:
        """Run every view on the trainer's current state and node; record failures unless strict."""
        for view in self.views:
            try:
                view.run()
            except Exception as err:
                if strict:
                    raise
                text = "".join(traceback.format_exception(err))
                log.error("tandem analysis %s failed at %s:\n%s", view.NAME, self.trainer.node, text)
                self.trainer.lineage.record({f"tandem/{view.NAME}/error": f"{type(err).__name__}: {err}"})
                self.trainer.lineage.put_artifact(f"{view.NAME}.error", f"{view.NAME}.error.txt", text.encode())
