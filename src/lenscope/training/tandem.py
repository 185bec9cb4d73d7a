"""Tandem analyses: checked at trainer construction, run as borrowed views at validation cadence (A9)."""

from __future__ import annotations

import functools
import logging
import threading
import traceback
from collections.abc import Sequence
from typing import Any


from ..config import schema
from ..errors import ConfigError
from ..files import is_plain_name
from ..store import Node
from .lineage import Lineage
from .placement import abstract

log = logging.getLogger("lenscope.tandem")


def check_analyses(trainer_cls: type, analyses: Sequence[type]) -> None:
    """Distinct NAMEs, and every config path an analysis reads present in the trainer's CONFIG."""
    seen: dict[str, type] = {}
    have = schema(trainer_cls.CONFIG).by_path
    for cls in analyses:
        name = getattr(cls, "NAME", "")
        if not hasattr(cls, "from_trainer"):
            raise ConfigError(f"{trainer_cls.__name__}.ANALYSIS holds {cls!r}, which is not an AnalysisBase subclass")
        if not is_plain_name(name):
            raise ConfigError(f"{trainer_cls.__name__}.ANALYSIS: {cls.__name__}.NAME must be a nonempty plain name "
                              f"(it names the file and the artifact), got {name!r}")
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
    """The borrowed views of one trainer, created once so each keeps its compiled function.

    At each validation the views compute on the trainer's current state, in the training thread
    (the state is read at the right step; multi-process gathers stay in order). Plotting and saving,
    which can cost more than a validation pass, then run on one background thread while training
    goes on, at most one validation behind, each attached to the node the results were computed
    on. With `strict`, or for table-mode analyses, everything runs in the training thread.
    `warm()` compiles the views from the state's shapes on that thread as training starts.
    """

    def __init__(self, trainer: Any, analyses: Sequence[type]) -> None:
        self.trainer = trainer
        self.analyses = list(analyses)
        self._views: list[Any] | None = None
        self._pending: threading.Thread | None = None

    @property
    def views(self) -> list[Any]:
        """One borrowed view per declared analysis."""
        if self._views is None:
            self._views = [cls.from_trainer(self.trainer) for cls in self.analyses]
        return self._views

    def warm(self) -> None:
        """Select (here) and compile (on the background thread) each view, so the first validation does not wait.

        That thread first loads the plotting stack (a throwaway figure), while the training step compiles.
        """
        if not (self.analyses and self.trainer.args.analyze) or self._views is not None:
            return
        state = abstract(self.trainer.state)
        jobs = []
        for view in self.views:
            try:
                if view.output_schema() is None:
                    batch, key = abstract(view.analysis_batch()), abstract(view.analysis_key())
                    jobs.append((view, (state, batch, key)))
            except Exception:  # the first run repeats this in the training loop and reports the error there
                log.debug("tandem analysis %s not compiled ahead", view.NAME, exc_info=True)
        self._pending = threading.Thread(target=self._ahead, args=(jobs,), name="lenscope-tandem-compile",
                                         daemon=True)
        self._pending.start()

    def _ahead(self, jobs: list[tuple[Any, tuple]]) -> None:
        """On the warm-up thread: load the plotting stack (else the first figure does), then compile each view."""
        if jobs and self.trainer.is_writer:
            from ..analysis.plots import prewarm

            _quietly(prewarm, "loading the plotting stack")
        for view, args in jobs:
            _quietly(functools.partial(view.executable, *args), f"compiling {view.NAME} ahead")  # validations call it

    def run(self, strict: bool) -> None:
        """Run every view on the trainer's current state and node; record failures unless strict."""
        self.wait()
        node = self.trainer.lineage.flush()
        computed: list[tuple[Any, Any]] = []
        for view in self.views:
            try:
                if strict or view.output_schema() is not None:
                    view.run()
                    continue
                # AnalysisBase.run(), split: this half here, publish and on_analysis_end on the thread
                view.on_analysis_start()
                results = view.compute()
                view.on_analysis_epoch_end(results)
                computed.append((view, results))
            except Exception as err:
                if strict:
                    raise
                self._record(view, node, err)
        if computed:
            self._pending = threading.Thread(target=self._publish, args=(computed, node),
                                             name="lenscope-tandem", daemon=True)
            self._pending.start()

    def _publish(self, computed: list[tuple[Any, Any]], node: Node) -> None:
        attached = Lineage.attach(self.trainer.store, node, writer=self.trainer.lineage.writer)
        for view, results in computed:
            view._pin.lineage = attached  # on this thread the view's node is the one it computed on
            try:
                view.publish(results)
                view.on_analysis_end(results)
            except Exception as err:  # noqa: BLE001  (recorded on the node: a figure never stops training)
                self._record(view, node, err)
            finally:
                del view._pin.lineage

    def _record(self, view: Any, node: Node, err: Exception) -> None:
        """Log the failure with its traceback and record it on `node` (a value and an error artifact)."""
        text = "".join(traceback.format_exception(err))
        log.error("tandem analysis %s failed at %s:\n%s", view.NAME, node, text)
        if self.trainer.lineage.writer:
            store = self.trainer.store
            store.record(node, {f"tandem/{view.NAME}/error": f"{type(err).__name__}: {err}"})
            store.put_artifact(node, f"{view.NAME}.error", f"{view.NAME}.error.txt", text.encode())

    def wait(self) -> None:
        """Block until the ahead-of-time compilation or the last validation's figures and files are done."""
        if self._pending is not None:
            self._pending.join()
            self._pending = None


def _quietly(work: Any, what: str) -> None:
    """Ahead-of-time work: a failure here only means the first validation does it, and reports it, itself."""
    try:
        work()
    except Exception:
        log.debug("tandem: %s failed", what, exc_info=True)
