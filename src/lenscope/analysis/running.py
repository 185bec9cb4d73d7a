"""Running analyses, one path (D3, D4): check configs, bind each to a trainer as a view, run a batch or a whole run.

    batch = execute_analysis_op(trainer, batch, 0, AnalysisCfg("activation_stats"))  # an AnalysisBatch
    rows = list(execute_analysis_step(trainer, batch, 0, AnalysisCfg("grokking/probe_acts")))
    out = trainer.run_analysis("activation_stats", AnalysisCfg("grokking/fourier", name="spectrum"))  # AnalysisResults

Every entry point checks its configs once (`check_cfgs`), gives the trainer state through its own
`setup(attach=True)` (restore `base` and write onto that node), and runs a view made by `bind`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import job_registry as jobs_registry
from ..errors import UsageError, hint
from ..store import Node, Store
from ..training import BaseTrainer
from ..training.lineage import Lineage, Mode, open_lineage
from ..training.phase import Phase, session
from . import op_registry as ops
from .base import AnalysisBase, concrete_trainer
from .batch import AnalysisBatch, AnalysisEntry, AnalysisResults
from .cfg import AnalysisCfg, coerce_cfg, option_fields
from .table_mode import step_rows, table_artifact
from .table_schema import load_table


# -- configs ------------------------------------------------------------------------------
def resolve_analysis(cfg: AnalysisCfg) -> type:
    """The analysis class of `cfg`: a registered op name, a job name or `module:Class`, or the class itself."""
    spec = cfg.analysis
    if isinstance(spec, str) and spec in ops.names():
        cls = ops.get(spec)
    elif isinstance(spec, type) or ":" in spec or spec in jobs_registry.jobs():
        cls = jobs_registry.resolve(spec)
    else:
        choices = ops.names() + [n for n, c in jobs_registry.jobs().items() if issubclass(c, AnalysisBase)]
        raise UsageError(f"unknown analysis {spec!r}{hint(spec, choices)}; analyses: {', '.join(choices)} "
                         "(or package.module:Class)")
    if not (isinstance(cls, type) and issubclass(cls, AnalysisBase)):
        raise UsageError(f"{spec!r} is {getattr(cls, '__name__', cls)}, not an analysis (an AnalysisBase subclass)")
    return cls


@functools.cache
def combined_class(analysis: type, trainer: type) -> type:
    """`analysis` on `trainer`: a general analysis (no trainer in its bases) is mixed in front of the trainer class."""
    bound = concrete_trainer(analysis)
    if bound is not None:
        if not issubclass(trainer, bound):
            raise UsageError(f"{analysis.__name__} analyzes {bound.__name__} jobs, "
                             f"but the trainer is {trainer.__name__}; "
                             "use a general analysis (lenscope.ops) or one written for this trainer")
        return analysis
    if issubclass(trainer, analysis):
        return trainer
    return type(f"{analysis.__name__}[{trainer.__name__}]", (analysis, trainer),
                {"__module__": analysis.__module__, "__doc__": analysis.__doc__})


def resolve_params(cls: type, cfg: AnalysisCfg | None) -> dict[str, Any]:
    """The analysis parameters: class PARAMS defaults updated by cfg.params; unknown names are an error."""
    defaults = dict(cls.PARAMS)
    given = dict(cfg.params) if cfg is not None else {}
    for key in given:
        if key not in defaults:
            listed = ", ".join(defaults) or "none"
            raise UsageError(f"{cls.__name__} has no parameter {key!r}{hint(key, defaults)}; its parameters: {listed} "
                             f"(AnalysisCfg fields: {', '.join(option_fields())})")
    return {**defaults, **given}


@dataclass(frozen=True)
class Checked:
    """One config, checked: the analysis class combined with the trainer's, its result name and its parameters."""

    cfg: AnalysisCfg
    cls: type
    name: str
    params: Mapping[str, Any]


def check_cfgs(trainer: BaseTrainer, cfgs: tuple) -> list[Checked]:
    """Resolve and validate every cfg before anything runs: known analyses, params and step_fn, distinct names.

    A string is an `--analysis` text (`NAME`, `NAME,key=value,...` or a YAML file of several).
    """
    checked: list[Checked] = []
    seen: dict[str, str] = {}
    for cfg in (c for item in cfgs for c in (AnalysisCfg.parse(item) if isinstance(item, str) else [coerce_cfg(item)])):
        cls = combined_class(resolve_analysis(cfg), type(trainer))
        name = cfg.result_name(cls)
        if name in seen:
            raise UsageError(f"two analyses would both save results as {name!r} ({seen[name]} and {cfg.analysis!r}); "
                             "give one a distinct AnalysisCfg(name=...)")
        seen[name] = repr(cfg.analysis)
        cfg.check_step(trainer)
        checked.append(Checked(cfg, cls, name, resolve_params(cls, cfg)))
    return checked


def tandem_analyses(trainer_cls: type, specs: Any) -> list[type]:
    """The tandem analyses `training/analyses` names (`NAME`, `NAME,key=value,...` or mappings) as classes of
    `trainer_cls`'s tandem: each view bound to its cfg and params. An analysis job's own config names none."""
    if issubclass(trainer_cls, AnalysisBase):
        return []
    if isinstance(specs, (str, Mapping)):
        specs = [specs]
    made: list[type] = []
    for spec in specs:
        for cfg in AnalysisCfg.parse(spec) if isinstance(spec, str) else [coerce_cfg(spec)]:
            cls = combined_class(resolve_analysis(cfg), trainer_cls)
            checked = Checked(cfg, cls, cfg.result_name(cls), resolve_params(cls, cfg))
            named = {"NAME": cfg.name} if cfg.name else {}  # else the analysis's own class names what it saves
            made.append(type(cls.__name__, (cls,), {**named, "__module__": cls.__module__, "__doc__": cls.__doc__,
                                                    "from_trainer": _bound_view(checked)}))
    return made


def _bound_view(checked: Checked) -> classmethod:
    """A from_trainer that binds the view it makes to the checked cfg and its params."""
    def from_trainer(cls: type, trainer: BaseTrainer, *, publisher: Any = None, lineage: Any = None) -> AnalysisBase:
        view = cls(view_of=trainer, publisher=publisher, lineage=lineage)
        view.use_cfg(checked.cfg, checked.params, row_step=own_step(trainer, checked.cfg))
        return view
    return classmethod(from_trainer)


# -- binding --------------------------------------------------------------------------------
def results_lineage(trainer: BaseTrainer, cfg: AnalysisCfg, name: str) -> Lineage | None:
    """Where cfg.output_store sends results: a node of the trainer's store, or a new node in another store (None: the
    trainer's node)."""
    spec = cfg.output_store
    if spec is None:
        return None
    if isinstance(spec, Node) or (isinstance(spec, str) and "@" in spec):
        return open_lineage(trainer.store, Mode.ATTACH, trainer.store.get(spec).node, writer=trainer.is_writer)
    store = spec if isinstance(spec, Store) else Store(spec, readonly=not trainer.is_writer)
    return open_lineage(store, Mode.EXPORT, trainer.node, name=name, config={"analysis": name},
                        writer=trainer.is_writer)


MAX_BOUND_VIEWS = 8  # views a trainer keeps (least recently used dropped first), each with its compiled programs


def bind(trainer: BaseTrainer, checked: Checked) -> AnalysisBase:
    """The analysis of a checked cfg as a view on `trainer` (state and node read from it), made once per cfg and
    reused: `trainer.bound_views` keeps the MAX_BOUND_VIEWS most recently used, with their compiled functions
    (a loop over new parameter values, which make new cfgs, holds no more than that).

    Its input table, if it names one, is read afresh on each bind: an earlier step may have rewritten it.
    """
    views = trainer.bound_views
    found = next((i for i, (cfg, view) in enumerate(views)
                  if type(view) is checked.cls and same_cfg(cfg, checked.cfg)), None)
    if found is not None:
        views.append(views.pop(found))  # the most recently used last
        view = views[-1][1]
    else:
        view = checked.cls.from_trainer(trainer, lineage=results_lineage(trainer, checked.cfg, checked.name))
        view.use_cfg(checked.cfg, checked.params, row_step=own_step(trainer, checked.cfg))
        views.append((checked.cfg, view))
        del views[:-MAX_BOUND_VIEWS]
    if input_store_of(view) is not None:
        view.input_dataset = load_input(view)
    return view


def same_cfg(a: AnalysisCfg, b: AnalysisCfg) -> bool:
    """Whether two cfgs are equal field by field; params holding arrays compare equal only as the same objects."""
    try:
        return a is b or bool(a == b)
    except (TypeError, ValueError):  # an array's == is elementwise: no single answer
        return False


def own_step(trainer: BaseTrainer, cfg: AnalysisCfg) -> Any:
    """The trainer's own row step that `cfg.step_fn` names (table mode calls it per batch), or None for the
    default `analysis_step` that every trainer inherits."""
    if getattr(type(trainer), cfg.step_fn, None) is BaseTrainer.analysis_step:
        return None
    return getattr(trainer, cfg.step_fn)


def input_store_of(analysis: AnalysisBase) -> tuple[Any, str] | None:
    """(node, artifact name) of the analysis's input table: cfg.input_store, else the class INPUT_STORE."""
    cfg = analysis.analysis_cfg
    spec = cfg.input_store if cfg is not None and cfg.input_store is not None else None
    spec = getattr(analysis, "INPUT_STORE", None) if spec is None else spec
    if spec is None:
        return None
    if isinstance(spec, Mapping):
        if set(spec) != {"node", "name"}:
            raise UsageError(f"input_store mapping needs exactly the keys node and name, got {sorted(spec)}")
        return spec["node"], spec["name"]
    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        return spec[0], spec[1]
    if isinstance(spec, str):
        node, sep, name = spec.rpartition("/")
        return (node, name) if sep else (analysis.node, name)
    raise UsageError(f"input_store must be 'NODE/NAME', 'NAME' (a table on this node), (node, name) or "
                     f"{{node: ..., name: ...}}, got {spec!r}")


def load_input(analysis: AnalysisBase) -> Any:
    """The input table (a datasets.Dataset) named by the analysis's input_store."""
    where = input_store_of(analysis)
    if where is None:
        raise UsageError(f"{type(analysis).__name__} reads an input table: set AnalysisCfg(input_store='NODE/NAME')")
    node, name = where
    return load_table(analysis.store, node, name)


def ready(trainer: BaseTrainer, checked: list[Checked]) -> None:
    """Give the trainer state once through its own setup().

    A trainer with `base` restores that checkpoint and attaches to the node (no new node, no status change).
    """
    if trainer.state is None:
        trainer.setup(attach=True)


def analysis_for(obj: Any, cfg: Any = None) -> AnalysisBase:
    """The analysis to run: `cfg`, else the cfg `AnalysisCfg.apply` attached, bound to the trainer `obj`, or `obj`
    itself (an analysis, no cfg); with state."""
    if cfg is None and not isinstance(obj, AnalysisBase):
        cfg = getattr(obj, "analysis_cfg", None)
    if cfg is None:
        if not isinstance(obj, AnalysisBase):
            raise UsageError(f"{type(obj).__name__} is a trainer: pass analysis_cfg=AnalysisCfg('<analysis name>') "
                             "or attach one first with AnalysisCfg(...).apply(trainer)")
        ready(obj, [])
        return obj
    if not isinstance(obj, BaseTrainer):
        raise UsageError(f"expected a trainer or an analysis, got {type(obj).__name__}")
    checked = check_cfgs(obj, (cfg,))
    ready(obj, checked)
    return bind(obj, checked[0])


# -- running --------------------------------------------------------------------------------
def check_batch_idx(batch_idx: Any) -> int:
    """A batch index, or a UsageError for a cfg passed where the seed-002 signature has batch_idx."""
    if isinstance(batch_idx, bool) or not isinstance(batch_idx, (int, np.integer)) or batch_idx < 0:
        raise UsageError(f"batch_idx must be an int >= 0, got {batch_idx!r}; the signature is (trainer, batch=None, "
                         "batch_idx=0, analysis_cfg=None, analysis_inputs=None): pass the cfg as analysis_cfg=...")
    return int(batch_idx)


def _batch(analysis: AnalysisBase, batch: Mapping[str, Any] | None, batch_idx: int) -> Mapping[str, Any]:
    """The caller's batch, else batch `batch_idx` of one pass over the analysis split (padded if short)."""
    if batch is not None:
        return batch
    if batch_idx == 0:
        return analysis.analysis_batch()
    return analysis.pass_batch(analysis.SPLIT, batch_idx)[0]


def execute_analysis_op(obj: Any, batch: Mapping[str, Any] | None = None, batch_idx: int = 0,
                        analysis_cfg: Any = None, analysis_inputs: Mapping[str, Any] | None = None) -> AnalysisBatch:
    """One batch's results in memory as an AnalysisBatch (NumPy, gathered across processes).

    The cfg is `analysis_cfg`, else `obj.analysis_cfg`; batch None = batch `batch_idx` of the analysis
    split. `analysis_inputs` hold for this call only, over the config-backed values (`analysis_inputs`).
    """
    analysis = analysis_for(obj, analysis_cfg)
    chosen = _batch(analysis, batch, check_batch_idx(batch_idx))
    with analysis.inputs_for_call(analysis_inputs):
        results = analysis.compute(chosen)  # through cache_dir when the cfg names one
    return AnalysisBatch(results, batch_idx)


def execute_analysis_step(obj: Any, batch: Mapping[str, Any] | None = None, batch_idx: int = 0,
                          analysis_cfg: Any = None,
                          analysis_inputs: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """Serialized rows (one dict per example) of one batch of a table analysis, validated against its schema."""
    analysis = analysis_for(obj, analysis_cfg)
    with analysis.inputs_for_call(analysis_inputs):
        rows = step_rows(analysis, _batch(analysis, batch, check_batch_idx(batch_idx)))
    yield from rows


def run_analysis(trainer: BaseTrainer, *cfgs: Any) -> AnalysisResults:
    """Check every cfg, give the trainer state once, then run each analysis in turn on it, in the analysis phase.

    Each analysis fires on_analysis_start, on_analysis_epoch_end (per pass) and on_analysis_end.
    Returns an AnalysisResults: `out[name]` is a table analysis's Dataset (process 0) or an analysis's
    gathered results; `out.entry(name)` adds the node and the artifacts saved there.
    """
    if not cfgs:
        raise UsageError("run_analysis needs at least one analysis (an AnalysisCfg, a registered name or a class)")
    checked = check_cfgs(trainer, cfgs)
    with session(trainer, Phase.ANALYSIS):
        ready(trainer, checked)
        return AnalysisResults({item.name: _entry(bind(trainer, item)) for item in checked})


def _entry(view: AnalysisBase) -> AnalysisEntry:
    """Run a bound analysis and describe what it left: the node, its artifacts there, its table or results."""
    value = view.run()
    name, node = view.NAME, view.node
    is_table = view.output_schema() is not None
    saved = set(view.lineage.store.artifact_names(node)) if view.is_writer else set()
    artifacts = tuple(a for a in (name, table_artifact(name)) if a in saved)
    if not is_table:
        return AnalysisEntry(name, node, artifacts, results=value)
    dataset = load_table(view.lineage.store, node, name) if table_artifact(name) in saved else value
    return AnalysisEntry(name, node, artifacts, dataset=dataset)
