"""AnalysisBase: the trainer with run() replaced by select -> capture in one jit -> gather -> plot on process 0."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import flax.linen as nn
import jax

from ..capture import Capturer, Target, backend_for
from ..capture.patch_access import PatchAccess
from ..files import check_plain_name
from ..training import BaseTrainer
from ..training.lineage import Lineage, Mode
from ..training.phase import Phase, session
from ..training.placement import abstract, to_host
from ..training.publisher import Publisher
from .cfg import choose_paths
from .lazy_plots import PlotHelper, prewarm_plots
from .render import render
from .table_mode import publish_table, run_table

# XLA options of every analysis (tandem, standalone, ops) unless it sets COMPILER_OPTIONS: half the compile time.
# One set everywhere, so a tandem result and the standalone run on that step's checkpoint are identical (#11.12).
DEFAULT_COMPILER_OPTIONS: Mapping[str, Any] = {"xla_backend_optimization_level": 0}

C = TypeVar("C")
M = TypeVar("M", bound=nn.Module)

# (view, lineage) while a tandem view publishes on the publisher's thread: its node there is the one it computed on
_PUBLISHING: ContextVar[tuple[Any, Lineage] | None] = ContextVar("lenscope_publishing", default=None)


class AnalysisBase(PatchAccess, BaseTrainer[C, M], Generic[C, M]):
    """Subclass as `class MyAnalysis(AnalysisBase[C, M], MyTrainer)`; implement select, analyze and plot."""

    NAME: ClassVar[str] = ""
    ANALYSIS: ClassVar[tuple] = ()
    TARGET: ClassVar[Target] = nn.Module  # module classes or their import paths ('pkg.module.Class')
    SPLIT: ClassVar[str] = "validation"
    SCHEMA: ClassVar[Mapping[str, Any] | None] = None  # column -> dtype/shape per example: table mode (D2)
    COMPILER_OPTIONS: ClassVar[Mapping[str, Any] | None] = None  # XLA options; None: DEFAULT_COMPILER_OPTIONS
    PARAMS: ClassVar[Mapping[str, Any]] = {}  # parameter defaults, set through AnalysisCfg.params or op keywords
    analysis_cfg: Any = None  # the active AnalysisCfg when run through run_analysis / execute_analysis_op
    input_dataset: Any = None  # the input_store table (a datasets.Dataset), read when bound to an AnalysisCfg
    _view_of: BaseTrainer | None = None  # the trainer a borrowed view reads its state and node from
    _own_state: Any = None
    _own_lineage: Lineage | None = None  # a standalone analysis's node, or where a view's results go instead
    _publisher: Publisher | None = None  # a tandem view's: publish() and on_analysis_end() run through it
    _cfg_params: Mapping[str, Any] | None = None  # PARAMS updated by the bound AnalysisCfg's params
    _call_inputs: Mapping[str, Any] | None = None  # the caller's analysis_inputs, during one call only

    heatmap = PlotHelper("heatmap")  # the plot helpers (lenscope.analysis.plots), matplotlib loaded on first use
    heatmaps = PlotHelper("heatmaps")
    line = PlotHelper("line")
    bar = PlotHelper("bar")
    scatter = PlotHelper("scatter")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A1: the analysis must come before any trainer in the bases, so run() is the analysis."""
        super().__init_subclass__(**kwargs)
        for klass in cls.__mro__:
            if klass is AnalysisBase:
                break
            if issubclass(klass, BaseTrainer) and not issubclass(klass, AnalysisBase):
                trainers = [b.__name__ for b in cls.__bases__ if not issubclass(b, AnalysisBase)]
                raise TypeError(
                    f"{cls.__name__}: run() resolves to the trainer {klass.__name__}, not the analysis; "
                    f"put the analysis first: "
                    f"class {cls.__name__}(AnalysisBase[C, M], {', '.join(trainers) or klass.__name__})"
                )

    def __init__(self, config: Any = None, **kwargs: Any) -> None:
        """Trainer construction only: no setup, no state (A2)."""
        self._view_of: BaseTrainer | None = None
        _check_name(type(self))
        super().__init__(config, **kwargs)
        self.capturer = self._new_capturer()

    # -- the user's part -------------------------------------------------------------
    def select(self, paths: list[str]) -> str | list[str]:
        """Choose one discovered path (a string) or several (a nonempty list)."""
        raise NotImplementedError(f"{type(self).__name__} must define select(paths)")

    def analyze(self, layer: Any, inputs: Any) -> Any:
        """Pure: compute a small PyTree from the captured layer(s) and inputs (crop/reduce here)."""
        raise NotImplementedError(f"{type(self).__name__} must define analyze(layer, inputs)")

    def plot(self, results: Any) -> Any:
        """On process 0 with NumPy results: a Figure, a JSON value, or None."""
        return None

    # -- hooks ---------------------------------------------------------------------
    def on_analysis_start(self) -> None:
        """Called before each analysis run."""

    def on_analysis_epoch_end(self, results: Any) -> None:
        """Called after each pass over the analysis data."""

    def on_analysis_end(self, results: Any) -> None:
        """Called after each analysis run with the gathered results."""

    # -- state and node: own, or borrowed from a trainer ------------------------------
    @property
    def state(self) -> Any:
        """The analyzed state: the trainer's current one for a borrowed view."""
        return self._view_of.state if self._view_of is not None else self._own_state

    @state.setter
    def state(self, value: Any) -> None:
        if self._view_of is not None:
            raise RuntimeError(f"{type(self).__name__} is a borrowed view: the trainer alone replaces its state")
        self._own_state = value

    @property
    def lineage(self) -> Lineage | None:
        """The node holder: its own, else the trainer's for a borrowed view; while a tandem view publishes, the
        lineage of the node its results were computed on."""
        pinned = _PUBLISHING.get()
        if pinned is not None and pinned[0] is self:
            return pinned[1]
        if self._own_lineage is not None or self._view_of is None:
            return self._own_lineage
        return self._view_of.lineage

    @lineage.setter
    def lineage(self, value: Lineage | None) -> None:
        self._own_lineage = value

    @classmethod
    def from_trainer(cls, trainer: BaseTrainer, *, publisher: Publisher | None = None,
                     lineage: Lineage | None = None) -> AnalysisBase:
        """A borrowed view on a running trainer: no construction, no state, no store of its own (A9).

        A tandem view publishes through the trainer's `publisher`; `lineage` sends a view's results to
        another node (AnalysisCfg.output_store) while state still comes from the trainer.
        """
        view = cls.__new__(cls)
        view._view_of, view._publisher, view._own_lineage = trainer, publisher, lineage
        for attr in ("args", "store", "base", "model", "model_kind", "schedule", "optimizer", "data", "placement"):
            setattr(view, attr, getattr(trainer, attr))
        view.capturer = view._new_capturer()
        view.restored_missing, view._checkpoints = [], None
        view._init_loop()
        return view

    # -- configuration and inputs ------------------------------------------------------
    def use_cfg(self, cfg: Any, params: Mapping[str, Any]) -> None:
        """Run as the AnalysisCfg `cfg` says (name, split, schema, names_filter) with `params` (PARAMS updated)."""
        self.analysis_cfg, self._cfg_params = cfg, dict(params)
        if cfg.name:
            self.NAME = cfg.name
        if cfg.split:
            self.SPLIT = cfg.split

    @property
    def params(self) -> dict[str, Any]:
        """This run's parameters: PARAMS updated by the active AnalysisCfg's params."""
        return dict(self._cfg_params) if self._cfg_params is not None else dict(self.PARAMS)

    @property
    def analysis_inputs(self) -> dict[str, Any]:
        """The config-backed values (`params`) under the caller's analysis_inputs of the running call.

        Read them in host code (compute, columns, plot): analyze() is traced once and compiled.
        """
        return {**self.params, **(self._call_inputs or {})}

    @contextlib.contextmanager
    def inputs_for_call(self, given: Mapping[str, Any] | None) -> Iterator[AnalysisBase]:
        """Scope a caller's analysis inputs to one call: they never stick to this (cached) analysis."""
        previous, self._call_inputs = self._call_inputs, dict(given or {})
        try:
            yield self
        finally:
            self._call_inputs = previous

    def _refuse_if_borrowed(self, what: str) -> None:
        if self._view_of is not None:
            raise RuntimeError(f"{type(self).__name__} is a borrowed view of {type(self._view_of).__name__}: "
                               f"it cannot {what}; the trainer owns setup, ticking and cleanup")

    def setup(self, resume: bool = True, *, attach: bool = True) -> None:
        """Restore `base` and attach to it (results go onto that node), or initialize state on a new node."""
        self._refuse_if_borrowed("set up")
        super().setup(attach=True)

    def tick(self) -> Any:
        """Analyses never tick (A8)."""
        self._refuse_if_borrowed("tick")
        raise RuntimeError(f"{type(self).__name__} is an analysis: analyses never tick their node")

    def cleanup(self) -> None:
        """Release what a standalone analysis owns."""
        self._refuse_if_borrowed("clean up")
        super().cleanup()

    def _make_lineage(self, mode: Mode) -> Lineage:
        """Check the selection first (state exists, no node yet: a bad select() writes nothing), then take the node."""
        self.selection(self.analysis_batch(), jax.random.PRNGKey(self.args.seed))  # the key only lends its shape
        return super()._make_lineage(mode)

    # -- running -------------------------------------------------------------------
    def analysis_batch(self) -> dict[str, jax.Array]:
        """A freshly prepared batch of the analysis split, placed outside the trace."""
        return self.batch(self.SPLIT, 0)

    def analysis_key(self) -> jax.Array:
        """The analysis PRNG key: a pure function of the seed and the node's seq."""
        return jax.random.fold_in(jax.random.PRNGKey(self.args.seed), self.node.seq)

    def _new_capturer(self) -> Capturer:
        """The one object that discovers, selects, and compiles this analysis's capture function."""
        return Capturer(self.trace, self.TARGET, functools.partial(choose_paths, self), self.analyze,
                        backend_for(self.model))

    def selection(self, batch: Mapping[str, jax.Array], key: jax.Array) -> tuple[list[str], bool]:
        """The checked selection (paths, is_list): discovery + select() once per analysis, before any compute (A4)."""
        return self.capturer.selection((self.state, batch, key))

    def compiled(self, batch: Mapping[str, jax.Array], key: jax.Array) -> Any:
        """The jitted capture function, built once and reused: same shapes never recompile (A5)."""
        return self.capturer.function((self.state, batch, key))

    def executable(self, state: Any, batch: Mapping[str, Any], key: Any) -> jax.stages.Compiled:
        """The capture function compiled for these argument types (arrays or ShapeDtypeStructs), once per signature.

        Compiling ahead (a tandem warm-up) and calling later use the same executable, whatever
        placement details jit's own cache would key on.
        """
        return self.capturer.executable((state, batch, key), self.compiler_options())

    def compiler_options(self) -> Mapping[str, Any]:
        """XLA options for the capture function: COMPILER_OPTIONS if set, else quick compilation.

        An analysis runs once per validation or checkpoint, so time spent optimizing machine code costs
        more than it saves; set COMPILER_OPTIONS = {} for full optimization. Tandem and standalone runs
        use the same options, so their results are identical.
        """
        return DEFAULT_COMPILER_OPTIONS if self.COMPILER_OPTIONS is None else self.COMPILER_OPTIONS

    @property
    def compilations(self) -> int:
        """How many executables this analysis compiled: one per distinct argument signature (A5)."""
        return self.capturer.compilations

    def compute(self, batch: Mapping[str, jax.Array] | None = None, key: jax.Array | None = None) -> Any:
        """Capture and analyze inside one compiled trace, then gather to NumPy on every process."""
        batch = self.analysis_batch() if batch is None else batch
        key = self.analysis_key() if key is None else key
        state = self.state
        return to_host(self.executable(state, batch, key)(state, batch, key))

    def publish(self, results: Any) -> Path | None:
        """Process 0 plots (a table also saves NAME.parquet); each file goes to the node's results folder and onto
        the node with the same bytes."""
        if not self.is_writer:
            return None
        if self.output_schema() is not None:
            return publish_table(self, results)
        rendered = render(self.NAME, self.plot(results))
        if rendered is None:
            return None
        filename, content = rendered
        return self.lineage.save(self.results_dir() / filename, self.NAME, content)

    def output_schema(self) -> Mapping[str, Any] | None:
        """Table mode's schema: the active AnalysisCfg's output_schema, else SCHEMA; None means not a table."""
        cfg = self.analysis_cfg
        return cfg.output_schema if cfg is not None and cfg.output_schema is not None else self.SCHEMA

    def run(self) -> Any:
        """The analysis: setup (unless borrowed), compute, then plot and save; hooks around it. Never ticks.

        A tandem view computes here, in the training thread, and concludes on its publisher's thread.
        """
        if self._view_of is None:  # standalone: the analysis phase is this run (run_analysis sets it for views)
            with session(self, Phase.ANALYSIS):
                self.setup()
                return self._run()
        return self._run()

    def _run(self) -> Any:
        """Compute, then conclude (plot and save); a table analysis runs its passes instead."""
        if self.output_schema() is not None:
            return run_table(self)
        self.on_analysis_start()
        results = self.compute()
        self.on_analysis_epoch_end(results)
        self.conclude(results)
        return results

    def conclude(self, results: Any) -> None:
        """publish(results), then on_analysis_end(results): now, or for a tandem view on its publisher's thread,
        attached to the node the results were computed on."""
        if self._publisher is None:
            self._conclude(results)
        else:
            self._publisher.defer(self.NAME, functools.partial(self._conclude, results))

    def _conclude(self, results: Any, lineage: Lineage | None = None) -> None:
        token = _PUBLISHING.set((self, lineage)) if lineage is not None else None
        try:
            self.publish(results)
            self.on_analysis_end(results)
        finally:
            if token is not None:
                _PUBLISHING.reset(token)

    def warm(self) -> list[Callable[[], Any]]:
        """A tandem view's ahead-of-time work, prepared in the training thread: load the plotting stack (process 0,
        if plot() is overridden) and compile the capture function for the state's shapes (table analyses compile on
        their first batch)."""
        if self.output_schema() is not None:
            return []
        args = abstract((self.state, self.analysis_batch(), self.analysis_key()))
        plots = self.is_writer and type(self).plot is not AnalysisBase.plot  # the default plot() draws nothing
        return [*([prewarm_plots] if plots else []), functools.partial(self.executable, *args)]


def _check_name(cls: type) -> None:
    check_plain_name(cls.NAME, f"{cls.__name__}.NAME")
