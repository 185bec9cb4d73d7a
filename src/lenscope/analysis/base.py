"""AnalysisBase: the trainer with run() replaced by select -> capture in one jit -> gather -> plot on process 0."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import flax.linen as nn
import jax

from ..capture import Capturer, Target, backend_for
from ..capture.patch_access import PatchAccess
from ..errors import UsageError
from ..files import check_plain_name
from ..training import BaseTrainer
from ..training.lineage import Lineage, Mode
from ..training.phase import Phase, session
from ..training.placement import abstract, to_host
from ..training.publisher import Publisher
from .cache import batch_digest, cached_results
from .cfg import choose_paths
from .holder import Borrowed, OwnState
from .hooks import fire
from .lazy_plots import PlotHelper, prewarm_plots
from .made_by import json_values, naming_class, provenance
from .render import render
from .table_mode import publish_table, run_table

# XLA options of every analysis (tandem, standalone, ops) unless it sets COMPILER_OPTIONS: half the compile time.
# One set everywhere, so a tandem result and the standalone run on that step's checkpoint are identical.
DEFAULT_COMPILER_OPTIONS: Mapping[str, Any] = {"xla_backend_optimization_level": 0}

C = TypeVar("C")
M = TypeVar("M", bound=nn.Module)


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
    row_step: Callable[..., Any] | None = None  # the trainer's own row step (AnalysisCfg.step_fn) for table mode
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

    def __init__(self, config: Any = None, *, view_of: BaseTrainer | None = None,
                 publisher: Publisher | None = None, lineage: Lineage | None = None, **kwargs: Any) -> None:
        """Trainer construction only: no setup, no state (A2); with `view_of`, a borrowed view (see from_trainer)."""
        _check_name(type(self))
        if view_of is None:
            self.holder: OwnState = OwnState()
            super().__init__(config, **kwargs)
        else:
            if config is not None or kwargs:
                raise UsageError(f"{type(self).__name__}: a borrowed view takes no config, base or store of its "
                                 f"own (it reads {type(view_of).__name__}'s)")
            self.holder = Borrowed(view_of, lineage)
            self._publisher = publisher
            self._share_construction(view_of)
            self._start()
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

    # -- state and node: the holder (own, or borrowed from a trainer) ----------------------
    @property
    def state(self) -> Any:
        """The analyzed state: the holder's (a borrowed view's is the trainer's current one)."""
        return self.holder.state

    @state.setter
    def state(self, value: Any) -> None:
        self.holder.state = value

    @property
    def lineage(self) -> Lineage | None:
        """Where results go: the holder's node (a borrowed view's: the trainer's, or the cfg's output_store node,
        or while a tandem view concludes, the node its results were computed on)."""
        return self.holder.current_lineage()

    @lineage.setter
    def lineage(self, value: Lineage | None) -> None:
        self.holder.lineage = value

    @property
    def borrowed(self) -> bool:
        """Whether this is a borrowed view (from_trainer) rather than a standalone analysis."""
        return self.holder.trainer is not None

    @classmethod
    def from_trainer(cls, trainer: BaseTrainer, *, publisher: Publisher | None = None,
                     lineage: Lineage | None = None) -> AnalysisBase:
        """A borrowed view on a running trainer: no construction of its own, no state, no store of its own (A9).

        It shares the trainer's config, model, optimizer and data, and reads the trainer's current state
        and node through its holder. A tandem view publishes through the trainer's `publisher`; `lineage`
        sends a view's results to another node (AnalysisCfg.output_store).
        """
        return cls(view_of=trainer, publisher=publisher, lineage=lineage)

    # -- configuration and inputs ------------------------------------------------------
    def use_cfg(self, cfg: Any, params: Mapping[str, Any], row_step: Callable[..., Any] | None = None) -> None:
        """Run as the AnalysisCfg `cfg` says (name, split, schema, names_filter) with `params` (PARAMS updated);
        `row_step` is the trainer's own step that table mode calls per batch (AnalysisCfg.step_fn)."""
        self.analysis_cfg, self._cfg_params, self.row_step = cfg, dict(params), row_step
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
        if self.borrowed:
            raise RuntimeError(f"{type(self).__name__} is a borrowed view of {type(self.holder.trainer).__name__}: "
                               f"it cannot {what}; the trainer owns setup, ticking and cleanup")

    def setup(self, resume: bool = True, *, attach: bool = True) -> None:
        """Restore `base` and attach to it (results go onto that node), or initialize state on a new node.

        Branching (`resume=False` with a `base`: `run_job(..., branch=True)`, `--branch`) is refused: the
        results of an analysis belong to the node whose state it analyzed.
        """
        self._refuse_if_borrowed("set up")
        if resume is False and self.base is not None and self.state is None:
            raise UsageError(refuse_branch(type(self).__name__, self.base))
        super().setup(attach=True)

    def train(self) -> None:
        """Refused: an analysis never trains; run() is the analysis, and its trainer class trains."""
        name, trainer = type(self).__name__, concrete_trainer(type(self))
        train = f"{trainer.__name__}(...).train()" if trainer is not None else "its trainer's train()"
        raise UsageError(f"{name} is an analysis: train() would not train anything; run the analysis with "
                         f"{name}(...).run() (or run_job({name}, ...), `lenscope run`), or train with {train}")

    def tick(self) -> Any:
        """Analyses never tick (A8)."""
        self._refuse_if_borrowed("tick")
        raise RuntimeError(f"{type(self).__name__} is an analysis: analyses never tick their node")

    def cleanup(self) -> None:
        """Release what a standalone analysis owns."""
        self._refuse_if_borrowed("clean up")
        super().cleanup()

    def finish(self, error: BaseException | None = None) -> None:
        """Mark a standalone analysis's node done or failed (a view's node is the trainer's to finish)."""
        self._refuse_if_borrowed("finish the node")
        super().finish(error)

    def save_checkpoint(self) -> None:
        """Analyses write no checkpoints: their state is the one they analyze."""
        self._refuse_if_borrowed("save a checkpoint")
        raise RuntimeError(f"{type(self).__name__} is an analysis: analyses never write checkpoints")

    def validate(self) -> dict[str, float]:
        """Validation metrics of a standalone analysis's state (a view's trainer validates its own)."""
        self._refuse_if_borrowed("validate (it would record on the trainer's node)")
        return super().validate()

    def run_analysis(self, *cfgs: Any) -> Mapping[str, Any]:
        """Run further analyses on this standalone analysis's state (on a view: run them on its trainer)."""
        self._refuse_if_borrowed("run analyses (call run_analysis on the trainer)")
        return super().run_analysis(*cfgs)

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
        """Capture and analyze inside one compiled trace, then gather to NumPy on every process.

        With AnalysisCfg.cache_dir the results of the analysis batch (or of a given batch, by a digest of its
        bytes) are read from and stored in that folder.
        """
        cfg = self.analysis_cfg
        if key is None and cfg is not None and cfg.cache_dir is not None:
            return cached_results(self, lambda: self._compute(batch, None),
                                  "batch" if batch is None else batch_digest(batch))
        return self._compute(batch, key)

    def _compute(self, batch: Mapping[str, jax.Array] | None, key: jax.Array | None) -> Any:
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
        return self.save_output(self.plot(results))

    def save_output(self, output: Any, name: str | None = None,
                    content: tuple[str, bytes] | None = None) -> Path | None:
        """Save a plot() result (or `content` = (filename, bytes) under `name`) in results and on the node, with
        what made it; a JSON result's scalar leaves also become values `analysis/NAME/...`."""
        name = name or self.NAME
        rendered = content or render(name, output)
        if rendered is None:
            return None
        filename, data = rendered
        path = self.lineage.save(self.results_dir() / filename, name, data,
                                 provenance=provenance(naming_class(type(self))),
                                 other_class=self.args.analysis_other_class)
        if content is None and filename.endswith(".json"):  # its numbers: listed, filtered, drawn over training
            self.lineage.record(self.result_values(name, output))
        return path

    def result_values(self, name: str, output: Any) -> Mapping[str, Any]:
        """The values a JSON plot() result records: its scalar leaves as `analysis/NAME/...` (override to choose)."""
        return json_values(name, output)

    def output_schema(self) -> Mapping[str, Any] | None:
        """Table mode's schema: the active AnalysisCfg's output_schema, else SCHEMA; None means not a table."""
        cfg = self.analysis_cfg
        return cfg.output_schema if cfg is not None and cfg.output_schema is not None else self.SCHEMA

    def run(self) -> Any:
        """The analysis: setup (unless borrowed), compute, then plot and save; hooks around it. Never ticks.

        A tandem view computes here, in the training thread, and concludes on its publisher's thread.
        """
        if not self.borrowed:  # standalone: the analysis phase is this run (run_analysis sets it for views)
            with session(self, Phase.ANALYSIS):
                self.setup()
                return self._run()
        return self._run()

    def _run(self) -> Any:
        """Compute, then conclude (plot and save); a table analysis runs its passes instead."""
        if self.output_schema() is not None:
            return run_table(self)
        fire(self, "on_analysis_start")
        results = self.compute()
        fire(self, "on_analysis_epoch_end", results)
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
        with self.holder.pinned(lineage):
            self.publish(results)
            fire(self, "on_analysis_end", results)

    def warm(self) -> list[Callable[[], Any]]:
        """A tandem view's ahead-of-time work, prepared in the training thread: load the plotting stack (process 0,
        if plot() is overridden) and compile the capture function for the state's shapes (table analyses compile on
        their first batch)."""
        if self.output_schema() is not None:
            return []
        args = abstract((self.state, self.analysis_batch(), self.analysis_key()))
        plots = self.is_writer and type(self).plot is not AnalysisBase.plot  # the default plot() draws nothing
        return [*([prewarm_plots] if plots else []), functools.partial(self.executable, *args)]


def concrete_trainer(cls: type) -> type | None:
    """The first concrete trainer class an analysis class already mixes in, if any."""
    for klass in cls.__mro__:
        if issubclass(klass, BaseTrainer) and not issubclass(klass, AnalysisBase) and klass is not BaseTrainer:
            return klass
    return None


def refuse_branch(name: str, base: Any) -> str:
    """Why an analysis does not branch from `base`, and what to do instead."""
    return (f"{name} is an analysis: it attaches its results to the node it analyzes ({base}) and never branches; "
            "drop --branch (branch=True, setup(resume=False)), or branch the training run first and analyze "
            "its node")


def _check_name(cls: type) -> None:
    check_plain_name(cls.NAME, f"{cls.__name__}.NAME")
