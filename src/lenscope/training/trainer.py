"""BaseTrainer: configuration, construction without state, setup (new, branch, resume, attach), cleanup."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import flax.linen as nn
import jax
import numpy as np
import optax

from .. import capture
from ..compile_cache import use_compile_cache
from ..config import hydrate, schema, to_dict
from ..errors import UsageError
from ..job_registry import job_name
from ..store import Node, Store
from .checkpoint import CheckpointWriter, read_checkpoint, restore_tree
from .config import TrainerConfig
from .data import ArrayData
from .interrupts import describe
from .kinds import ModelAccess, model_kind
from .lineage import Lineage, Mode, open_lineage
from .loop import TrainingLoop
from .placement import Placement
from .pretrained import check_pretrained
from .state import TrainState
from .tandem import Tandem, check_analyses

C = TypeVar("C")
M = TypeVar("M", bound=nn.Module)
log = logging.getLogger("lenscope.trainer")

# What __init__ builds (T1), shared whole by a borrowed view (BaseTrainer._share_construction).
CONSTRUCTED = ("placement", "store", "base", "args", "model", "model_kind", "schedule", "optimizer", "data")


def open_store(store: Store | str | os.PathLike | None, configured: str | None) -> Store:
    """The store to use: an open one, a URL or folder, the configured one, or the default.

    Processes other than 0 open it readonly: process 0 alone writes (multi-host jobs).
    """
    if isinstance(store, Store):
        return store
    return Store(store if store is not None else configured, readonly=jax.process_index() != 0)


class BaseTrainer(TrainingLoop, ModelAccess, Generic[C, M]):
    """A training job: subclasses define the model, data and loss; `run()` trains."""

    CONFIG: ClassVar[type] = TrainerConfig
    ANALYSIS: ClassVar[Sequence[type]] = ()
    analysis_cfg: Any = None  # the AnalysisCfg `AnalysisCfg.apply(trainer)` attached (seed-002 API)
    _named_tandem: tuple[type, ...] = ()  # the tandem analyses `training/analyses` names (a view has none)
    _example_batch: Mapping[str, Any] | None = None  # the batch init_state sees while the sharded init traces

    def __init__(self, config: Any = None, *, base: Node | str | None = None,
                 store: Store | str | os.PathLike | None = None) -> None:
        """Hydrate the config, open the store and build model, optimizer and data; no state yet (T1)."""
        check_analyses(type(self), self.ANALYSIS)  # before the store is opened: a bad declaration writes nothing
        sources = self._sources(config)
        args = config if isinstance(config, self.CONFIG) else hydrate(self.CONFIG, *sources)  # fails before any write
        check_pretrained(type(self), args)  # model/pretrained where the job builds its own model: refused now
        # The mesh is this run's (never a checkpoint's), checked against the devices before the store opens.
        self.placement = Placement.configure(args.mesh_shape, args.mesh_axes, args.mesh_rules)
        self.store = open_store(store, args.store_url)
        use_compile_cache(self.store.root)  # a second run at the same shapes skips compilation
        self.base = self.store.get(base).node if base is not None else None
        saved = self.store.config(self.base) if self.base is not None else None
        if saved and not isinstance(config, self.CONFIG):
            known = {path for path in schema(self.CONFIG).paths() if not path.startswith("mesh/")}
            args = hydrate(self.CONFIG, _only_known(saved, known), *sources)
        self.args: C = args
        if args.analyses:  # checked now, before anything is written: named analyses resolved by the analysis layer
            self._named_tandem = tuple(analysis_entry("tandem_analyses")(type(self), args.analyses))
            check_analyses(type(self), [*self.ANALYSIS, *self._named_tandem])
        self.model: M = self.build_model()
        self.model_kind = model_kind(self.model)  # linen, NNX or Equinox; a clear error otherwise
        self.schedule = self.build_schedule()
        self.optimizer = self.build_optimizer()
        self.data = self.build_data()
        self.state: TrainState | None = None
        self.lineage: Lineage | None = None
        self._start()

    def _start(self) -> None:
        """The parts of an instance that construction does not build: empty caches, the tandem scheduler, the loop.

        A borrowed analysis view (`AnalysisBase.from_trainer`) shares its trainer's construction and calls this
        too, so it holds everything a trainer's methods read.
        """
        self._checkpoints: CheckpointWriter | None = None
        self.restored_missing: list[str] = []
        self._initialized: TrainState | None = None
        self._found: dict[tuple, list[str]] = {}  # find()'s answers by target and argument signature
        self.bound_views: list[tuple[Any, Any]] = []  # (cfg, view) of the analyses run_analysis bound, reused
        self.also_trained: list[Node] = []  # final nodes of the other models this job trained (`run` prints each)
        self._tandem = Tandem(self, [*self.ANALYSIS, *self._named_tandem])
        self._init_loop()

    def _share_construction(self, trainer: BaseTrainer) -> None:
        """Take `trainer`'s construction as this object's own (config, store, base, model, optimizer, data, mesh)."""
        for name in CONSTRUCTED:
            setattr(self, name, getattr(trainer, name))

    # -- construction --------------------------------------------------------------
    @classmethod
    def base_as_config(cls, store: Store, base: Node | str) -> list[str] | None:
        """The overrides that make `base` this job's input, for `--resume --base` (None: a base is a state to go on)."""
        return None

    def _sources(self, config: Any) -> list[Any]:
        """Config sources in merge order: a dict, a YAML path, an override string, or a list of them."""
        if config is None or isinstance(config, self.CONFIG):
            return []
        if isinstance(config, (Mapping, str, Path)):
            return [config]
        if isinstance(config, Sequence):
            return list(config)
        raise UsageError(f"config must be a {self.CONFIG.__name__}, a dict, a YAML path or a list of sources, "
                         f"got {type(config).__name__}")

    def build_model(self) -> M:
        """The model: a linen definition, an NNX module built with its nnx.Rngs, or an Equinox module."""
        raise NotImplementedError(f"{type(self).__name__} must define build_model()")

    def build_schedule(self) -> optax.Schedule:
        """Learning-rate schedule: linear warmup to `optimization/lr`, then constant."""
        args = self.args
        if args.warmup_steps > 0:
            return optax.linear_schedule(0.0, args.lr, args.warmup_steps)
        return optax.constant_schedule(args.lr)

    def build_optimizer(self) -> optax.GradientTransformation:
        """AdamW on the schedule with the configured betas and weight decay."""
        args = self.args
        return optax.adamw(self.schedule, b1=args.b1, b2=args.b2, weight_decay=args.weight_decay)

    def build_data(self) -> ArrayData:
        """The data splits; override to provide them."""
        raise NotImplementedError(f"{type(self).__name__} must define build_data()")

    # -- identity ------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The node name of this job: its registered name, else `module.Class` (just `Class` in scripts)."""
        return node_name(type(self))

    @property
    def node(self) -> Node:
        """The job's current node (after setup)."""
        if self.lineage is None:
            raise RuntimeError(f"{type(self).__name__} has no node before setup()")
        return self.lineage.node

    @property
    def is_writer(self) -> bool:
        """Whether this process writes files and store records (process 0 only)."""
        return jax.process_index() == 0

    def results_dir(self, node: Node | None = None) -> Path:
        """The results folder of a node: <logging/results>/<name>/<nonce>/<seq>."""
        node = node or self.node
        return Path(self.args.results) / node.name / node.nonce / str(node.seq)

    # -- state ---------------------------------------------------------------------
    def model_inputs(self, batch: Mapping[str, Any]) -> tuple:
        """Positional model inputs taken from a batch."""
        return (batch["inputs"],)

    def init_params(self, key: jax.Array) -> Any:
        """Freshly initialized parameters (NNX and Equinox models were initialized by build_model)."""
        return self.model_kind.init_params(key, lambda: self.model_inputs(self.init_batch()))

    def init_state(self, key: jax.Array) -> TrainState:
        """A freshly initialized training state."""
        init_key, state_key = jax.random.split(key)
        params = self.init_params(init_key)
        return TrainState.create(params, self.optimizer.init(params), state_key,
                                 model_state=self.model_kind.init_model_state())

    def abstract_state(self) -> TrainState:
        """The state's structure, shapes, dtypes and shardings (ShapeDtypeStruct leaves), from `jax.eval_shape`."""
        self.batch("train", 0)  # placed before the trace: a whole split's batch is kept, and must not be a tracer
        shapes = jax.eval_shape(self.init_state, jax.random.PRNGKey(self.args.seed))
        return jax.tree_util.tree_map(
            lambda leaf, sharding: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding,
                                                        weak_type=leaf.weak_type),
            shapes, self.placement.state_shardings(shapes))

    def initialized(self) -> TrainState:
        """The initialized state at the configured seed; computed once, until setup() ends.

        On a mesh of several devices the init is jitted to create each leaf in its sharding (no leaf is
        ever whole on one device), with the example batch passed in rather than closed over.
        """
        if self._initialized is None:
            key = jax.random.PRNGKey(self.args.seed)
            if self.placement.single:
                self._initialized = self.init_state(key)
            else:
                shardings = jax.tree_util.tree_map(lambda leaf: leaf.sharding, self.abstract_state())
                self._initialized = self.placement.init(self._init_from, shardings)(key, self.batch("train", 0))
        return self._initialized

    def _init_from(self, key: jax.Array, batch: Mapping[str, Any]) -> TrainState:
        """init_state(key) with `batch` as the example batch (inside the jitted, sharded init)."""
        self._example_batch = batch
        try:
            return self.init_state(key)
        finally:
            self._example_batch = None

    def init_batch(self) -> Mapping[str, Any]:
        """The example batch the model is initialized on: the first training batch."""
        return self._example_batch if self._example_batch is not None else self.batch("train", 0)

    def surgery(self, state: TrainState, saved: Any) -> TrainState:
        """Map a restored checkpoint tree onto the abstract state (`abstract_state()`): strict by default (T2).

        Override to restore a changed model on purpose, e.g. with `partial_restore` or
        `restore_tree(state, saved, may_miss=...)`; set `self.restored_missing` to what stayed initialized.
        `state`'s leaves are `jax.ShapeDtypeStruct`s: leaves left abstract are filled from `initialized()`
        afterwards, and a surgery that needs real initial values calls `self.initialized()` itself. The
        model is initialized only then.
        """
        restored, self.restored_missing = restore_tree(state, saved)
        return restored

    def setup(self, resume: bool | None = None, *, attach: bool = False) -> None:
        """Choose the node (new, branch, resume `base`, or attach to it) and initialize or restore state; idempotent.

        With a `base` and no choice made, `setup()` inspects it: restores `base` and attaches to that
        node, writing nothing (no new node, no status change, no lease), as a notebook wants.
        `attach` (the same, explicitly) lets analyses and `test()` record onto the node;
        `resume=True` takes the lineage over; `resume=False` branches a new lineage from `base`.
        """
        if self.state is not None:
            return
        attach = attach or (self.base is not None and resume is None)
        if self.base is None:
            state = self.initialized()
        else:
            path = self.store.checkpoint(self.base)
            if path is None:
                raise UsageError(f"node {self.base} has no checkpoint to restore; "
                                 f"nodes with checkpoints: `lenscope ls --checkpoint`")
            target = self.abstract_state()
            saved = read_checkpoint(path, self.store.checkpoint_files(self.base), target=target)
            state = self._fill_abstract(self.surgery(target, saved))
            if not (resume or attach):
                state = state.replace(step=np.zeros_like(state.step))
        self._initialized = None
        self.state = self.placement.place_state(state)
        try:
            self.lineage = self._make_lineage(Mode.of(self.base, resume=bool(resume), attach=attach))
        except BaseException:
            self.state = None  # no node taken (a bad selection, a lineage another job runs): setup() can retry
            raise
        self._checkpoints = CheckpointWriter()

    def _fill_abstract(self, state: TrainState) -> TrainState:
        """Leaves surgery left abstract, taken from `initialized()`: the model is initialized only for them."""
        if not any(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in jax.tree_util.tree_leaves(state)):
            return state
        return jax.tree_util.tree_map(lambda leaf, real: real if isinstance(leaf, jax.ShapeDtypeStruct) else leaf,
                                      state, self.initialized())

    def _make_lineage(self, mode: Mode) -> Lineage:
        """The job's node, taken as `mode` says."""
        return open_lineage(self.store, mode, self.base, name=self.name, config=to_dict(self.args),
                            writer=self.is_writer)

    def run_tandem(self) -> None:
        """Run the declared tandem analyses on the current state and node, if `training/analyze`."""
        if self.args.analyze and (self.ANALYSIS or self._named_tandem):
            self._tandem.run(strict=self.args.analyze_strict)

    def run_analysis(self, *cfgs: Any) -> Mapping[str, Any]:
        """Run analyses (AnalysisCfg, names or classes) on this trainer's state, restored once; {name: result} (D4)."""
        return analysis_entry("run_analysis")(self, *cfgs)

    def analysis_step(self, batch: Mapping[str, Any] | None = None, batch_idx: int = 0,
                      analysis_inputs: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """The rows of one batch of the analysis `AnalysisCfg(...).apply(self)` attached (execute_analysis_step)."""
        return analysis_entry("execute_analysis_step")(self, batch, batch_idx, self.analysis_cfg, analysis_inputs)

    def unembed(self, params: Any, resid: jax.Array) -> jax.Array:
        """Logits of a residual stream [..., d_model] through the final unembedding (for the logit lens); override."""
        raise UsageError(f"{type(self).__name__} declares no unembed(params, resid); define it to use the logit lens, "
                         "e.g. return self.model.apply({'params': params}, resid, method=type(self.model).unembed_fn)")

    # -- notebook Debugger (A10) ---------------------------------------------------
    def _debug_args(self, batch: Mapping[str, Any] | None, state: Any = None) -> tuple:
        """(state, batch, key) for find/debug: this trainer's state, else `state`, else the initialized one.

        A trainer given a `base` never falls back to initialized weights: it restores `base` first (setup()
        inspects it, writing nothing), and a restore that fails raises here again.
        """
        if self.state is None and state is None and self.base is not None:
            self.setup()
        state = self.state if self.state is not None else state if state is not None \
            else self.placement.place_state(self.initialized())
        batch = self.batch("validation" if "validation" in self.data.splits else "train", 0) if batch is None else batch
        return (state, batch, jax.random.PRNGKey(self.args.seed))

    def find(self, target: capture.Target = None, batch: Mapping[str, Any] | None = None) -> list[str]:
        """Paths of `target` module calls (None: every module) in the forward, in call order (root is "").

        Discovery needs only shapes: it traces the abstract state, and each answer is kept per target and
        argument signature, so asking again is instant.
        """
        args = self._debug_args(batch, self.abstract_state() if self.state is None else None)
        key = (repr(target), capture.signature(args))
        if key not in self._found:
            self._found[key] = capture.find(self.trace, args, target, backend=capture.backend_for(self.model))
        return list(self._found[key])

    def debug(self, path: str,
              batch: Mapping[str, Any] | None = None) -> AbstractContextManager[tuple[Any, capture.DebugInputs]]:
        """`with trainer.debug(path) as (layer, inputs)`: eager, stops at the first call of `path`; state untouched."""
        return capture.debug(self.trace, self._debug_args(batch), path, backend=capture.backend_for(self.model))

    # -- lifecycle -----------------------------------------------------------------
    def tick(self) -> Node:
        """Advance the job's node to its successor (S2); only the owner of a node ticks it."""
        return self.lineage.tick()

    def finish(self, error: BaseException | None = None) -> None:
        """Mark the job's node done, or failed with the error (`interrupted` for Ctrl-C), keeping what was written."""
        if self.lineage is not None:
            self.lineage.finish("failed" if error else "done", error=describe(error) if error else None)

    def cleanup(self) -> None:
        """Wait for checkpoint and tandem writes, end the node if nothing did, and release the lineage (T4).

        A node still `running` ends `done`, or `failed` when cleanup runs while an exception propagates
        (in a `finally:` block); a resumed node that never advanced (an evaluation) keeps the status it had.
        """
        error = sys.exc_info()[1]
        try:
            self._tandem.wait()
            if self._checkpoints is not None:
                checkpoints, self._checkpoints = self._checkpoints, None
                checkpoints.close()
        except BaseException as err:
            error = error or err
            raise
        finally:
            if self.lineage is not None:
                self.lineage.close(error)


ANALYSIS_ENTRIES = "lenscope.analysis.running"  # the module behind run_analysis and analysis_step


def analysis_entry(name: str) -> Callable[..., Any]:
    """`run_analysis`, `execute_analysis_step` or `tandem_analyses` of the analysis layer.

    A deliberate reach upward (docs/architecture.md, "Upward reaches"): training cannot import analysis (it
    sits above), yet a trainer's `run_analysis` is part of its API (D4). The module is imported by name on
    first use, so it is there whatever the caller imported.
    """
    return getattr(importlib.import_module(ANALYSIS_ENTRIES), name)


def node_name(cls: type) -> str:
    """The node name of a job class: its registered name, else `module.Class` (just `Class` in scripts)."""
    if "JOB_NAME" not in cls.__dict__ and cls.__module__ in ("__main__", "builtins"):
        return Node.clean_name(cls.__qualname__)
    return Node.clean_name(job_name(cls))


def _only_known(saved: Mapping, known: set[str], prefix: str = "") -> dict:
    """The part of a saved nested config whose paths this schema knows."""
    out: dict = {}
    for key, value in saved.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and path not in known:
            sub = _only_known(value, known, path + "/")
            if sub:
                out[key] = sub
        elif path in known:
            out[key] = value
    return out
