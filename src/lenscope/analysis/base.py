"""AnalysisBase: the trainer with run() replaced by select -> capture in one jit -> gather -> plot on process 0."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import flax.linen as nn
import jax

from ..errors import UsageError
from ..files import is_plain_name, write_atomic
from ..training import BaseTrainer
from ..training.lineage import Lineage
from ..training.placement import signature, to_host
from . import plots
from .cfg import choose_paths
from .publish import render
from .trace import discover, make_capture_fn, validate_selection

TANDEM_COMPILER_OPTIONS: Mapping[str, Any] = {"xla_backend_optimization_level": 0}  # half the compile time

C = TypeVar("C")
M = TypeVar("M", bound=nn.Module)


class AnalysisBase(BaseTrainer[C, M], Generic[C, M]):
    """Subclass as `class MyAnalysis(AnalysisBase[C, M], MyTrainer)`; implement select, analyze and plot."""

    NAME: ClassVar[str] = ""
    ANALYSIS: ClassVar[tuple] = ()
    TARGET: ClassVar[type | tuple[type, ...]] = nn.Module
    SPLIT: ClassVar[str] = "validation"
    SCHEMA: ClassVar[Mapping[str, Any] | None] = None  # column -> dtype/shape per example: table mode (D2)
    COMPILER_OPTIONS: ClassVar[Mapping[str, Any] | None] = None  # XLA options; None: see compiler_options()
    analysis_cfg: Any = None  # the active AnalysisCfg when run through run_analysis / execute_analysis_op

    heatmap = staticmethod(plots.heatmap)
    heatmaps = staticmethod(plots.heatmaps)
    line = staticmethod(plots.line)
    bar = staticmethod(plots.bar)
    scatter = staticmethod(plots.scatter)

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
                    f"put the analysis first: class {cls.__name__}(AnalysisBase[C, M], {', '.join(trainers) or klass.__name__})"
                )

    def __init__(self, config: Any = None, **kwargs: Any) -> None:
        """Trainer construction only: no setup, no state (A2)."""
        self._view_of: BaseTrainer | None = None
        self._compiled = None
        self._executables: dict[tuple, Any] = {}
        _check_name(type(self))
        super().__init__(config, **kwargs)

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
        return self._view_of.state if self._view_of is not None else self.__dict__.get("_own_state")

    @state.setter
    def state(self, value: Any) -> None:
        if self.__dict__.get("_view_of") is not None:
            raise RuntimeError(f"{type(self).__name__} is a borrowed view: the trainer alone replaces its state")
        self.__dict__["_own_state"] = value

    @property
    def lineage(self) -> Lineage | None:
        """The node holder: the trainer's for a borrowed view (on the thread saving a tandem result, its node's)."""
        pinned = getattr(self.__dict__.get("_pin"), "lineage", None)
        if pinned is not None:
            return pinned
        return self._view_of.lineage if self._view_of is not None else self.__dict__.get("_own_lineage")

    @lineage.setter
    def lineage(self, value: Lineage | None) -> None:
        self.__dict__["_own_lineage"] = value

    @classmethod
    def from_trainer(cls, trainer: BaseTrainer) -> "AnalysisBase":
        """A borrowed view on a running trainer: no construction, no state, no store of its own (A9)."""
        view = cls.__new__(cls)
        view.__dict__.update(_view_of=trainer, _compiled=None, _executables={}, _borrowed=True,
                             _pin=threading.local())
        for attr in ("args", "store", "base", "model", "schedule", "optimizer", "data"):
            setattr(view, attr, getattr(trainer, attr))
        view.restored_missing, view._checkpoints = [], None
        view._init_loop()
        return view

    def _refuse_if_borrowed(self, what: str) -> None:
        if self._view_of is not None:
            raise RuntimeError(f"{type(self).__name__} is a borrowed view of {type(self._view_of).__name__}: "
                               f"it cannot {what}; the trainer owns setup, ticking and cleanup")

    def setup(self, resume: bool = True) -> None:
        """Restore `base` (results attach to it) or initialize state on a new node."""
        self._refuse_if_borrowed("set up")
        super().setup(resume=True)

    def tick(self) -> Any:
        """Analyses never tick (A8)."""
        self._refuse_if_borrowed("tick")
        raise RuntimeError(f"{type(self).__name__} is an analysis: analyses never tick their node")

    def cleanup(self) -> None:
        """Release what a standalone analysis owns."""
        self._refuse_if_borrowed("clean up")
        super().cleanup()

    def _make_lineage(self, resume: bool) -> Lineage:
        # State exists, no node yet: a bad select() fails here and writes nothing. The key only lends its shape.
        self.selection(self.analysis_batch(), jax.random.PRNGKey(self.args.seed))
        if self.base is not None:
            return Lineage.attach(self.store, self.base, writer=self.is_writer)
        return super()._make_lineage(False)

    # -- running -------------------------------------------------------------------
    def analysis_batch(self) -> dict[str, jax.Array]:
        """A freshly prepared batch of the analysis split, placed outside the trace."""
        return self.batch(self.SPLIT, 0)

    def analysis_key(self) -> jax.Array:
        """The analysis PRNG key: a pure function of the seed and the node's seq."""
        return jax.random.fold_in(jax.random.PRNGKey(self.args.seed), self.node.seq)

    def selection(self, batch: Mapping[str, jax.Array], key: jax.Array) -> tuple[list[str], bool]:
        """The checked selection (paths, is_list): discovery + select() once per analysis, before any compute (A4)."""
        if self.__dict__.get("_selection") is None:
            found = discover(self.trace, (self.state, batch, key), self.TARGET)
            self.__dict__["_selection"] = validate_selection(choose_paths(self, list(found)), found)
        return self.__dict__["_selection"]

    def compiled(self, batch: Mapping[str, jax.Array], key: jax.Array) -> Any:
        """The jitted capture function, built once and reused: same shapes never recompile (A5)."""
        if self._compiled is None:
            paths, as_list = self.selection(batch, key)
            self._compiled = jax.jit(make_capture_fn(self.trace, paths, as_list, self.analyze, self.TARGET))
        return self._compiled

    def executable(self, state: Any, batch: Mapping[str, Any], key: Any) -> jax.stages.Compiled:
        """The capture function compiled for these argument types (arrays or ShapeDtypeStructs), once per signature.

        Compiling ahead (a tandem warm-up) and calling later use the same executable, whatever
        placement details jit's own cache would key on.
        """
        args = (state, batch, key)
        kind = signature(args)
        if kind not in self._executables:
            self._executables[kind] = self.compiled(batch, key).lower(*args).compile(
                dict(self.compiler_options()) or None)
        return self._executables[kind]

    def compiler_options(self) -> Mapping[str, Any]:
        """XLA options for the capture function: COMPILER_OPTIONS if set, else quick compilation for a tandem view.

        A tandem analysis compiles while training runs and then runs once per validation, so time spent
        optimizing machine code costs more than it saves; set COMPILER_OPTIONS = {} for full optimization.
        """
        if self.COMPILER_OPTIONS is not None:
            return self.COMPILER_OPTIONS
        return TANDEM_COMPILER_OPTIONS if self._view_of is not None else {}

    @property
    def compilations(self) -> int:
        """How many executables this analysis compiled: one per distinct argument signature (A5)."""
        return len(self._executables)

    def compute(self, batch: Mapping[str, jax.Array] | None = None, key: jax.Array | None = None) -> Any:
        """Capture and analyze inside one compiled trace, then gather to NumPy on every process."""
        batch = self.analysis_batch() if batch is None else batch
        key = self.analysis_key() if key is None else key
        state = self.state
        return to_host(self.executable(state, batch, key)(state, batch, key))

    def publish(self, results: Any) -> Path | None:
        """Process 0 plots; the file goes to the node's results folder and onto the node with the same bytes."""
        if not self.is_writer:
            return None
        rendered = render(self.NAME, self.plot(results))
        if rendered is None:
            return None
        filename, content = rendered
        path = write_atomic(self.results_dir() / filename, content)
        self.lineage.put_artifact(self.NAME, filename, content)
        return path

    def output_schema(self) -> Mapping[str, Any] | None:
        """Table mode's schema: the active AnalysisCfg's output_schema, else SCHEMA; None means not a table."""
        cfg = self.analysis_cfg
        return cfg.output_schema if cfg is not None and cfg.output_schema is not None else self.SCHEMA

    def run(self) -> Any:
        """The analysis: setup (unless borrowed), compute, plot and save; hooks around it. Never ticks."""
        if self._view_of is None:
            self.setup()
        if self.output_schema() is not None:
            from .table_run import run_table

            return run_table(self)
        self.on_analysis_start()
        results = self.compute()
        self.on_analysis_epoch_end(results)
        self.publish(results)
        self.on_analysis_end(results)
        return results


def _check_name(cls: type) -> None:
    name = cls.NAME
    if not is_plain_name(name):
        raise UsageError(f"{cls.__name__}.NAME must be a nonempty plain name (it names the file and the artifact), "
                         f"got {name!r}")
