"""Execution helpers (D3): bind an AnalysisCfg to a trainer, run one batch in memory, or yield its table rows.

    results = execute_analysis_op(trainer, batch, AnalysisCfg("activation_stats"))
    rows = list(execute_analysis_step(trainer, batch, AnalysisCfg("grokking/probe_acts")))

Both work from a notebook on a restored trainer; table mode consumes exactly `execute_analysis_step`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jax

from ..errors import UsageError, hint
from ..training import BaseTrainer
from ..training.checkpoint import CheckpointWriter, read_checkpoint
from ..training.lineage import Lineage
from ..training.placement import place_state, to_host
from .base import AnalysisBase
from .cfg import AnalysisCfg, coerce_cfg
from .tables import batch_rows, load_table, parse_schema


def _concrete_trainer(cls: type) -> type | None:
    """The first concrete trainer class an analysis class already mixes in, if any."""
    for klass in cls.__mro__:
        if issubclass(klass, BaseTrainer) and not issubclass(klass, AnalysisBase) and klass is not BaseTrainer:
            return klass
    return None


@functools.cache
def combined_class(analysis: type, trainer: type) -> type:
    """`analysis` on `trainer`: a general analysis (no trainer in its bases) is mixed in front of the trainer class."""
    bound = _concrete_trainer(analysis)
    if bound is not None:
        if not issubclass(trainer, bound):
            raise UsageError(f"{analysis.__name__} analyzes {bound.__name__} jobs, but the trainer is {trainer.__name__}; "
                             "use a general analysis (lenscope.ops) or one written for this trainer")
        return analysis
    if issubclass(trainer, analysis):
        return trainer
    return type(f"{analysis.__name__}[{trainer.__name__}]", (analysis, trainer),
                {"__module__": analysis.__module__, "__doc__": analysis.__doc__})


def resolve_params(cls: type, cfg: AnalysisCfg | None) -> dict[str, Any]:
    """The analysis parameters: class PARAMS defaults updated by cfg.params; unknown names are an error."""
    defaults = dict(getattr(cls, "PARAMS", {}) or {})
    given = dict(cfg.params) if cfg is not None else {}
    for key in given:
        if key not in defaults:
            listed = ", ".join(defaults) or "none"
            raise UsageError(f"{cls.__name__} has no parameter {key!r}{hint(key, defaults)}; its parameters: {listed} "
                             "(AnalysisCfg fields: name, names_filter, split, max_batches, input_store, output_store, cache_dir)")
    return {**defaults, **given}


def ensure_state(trainer: BaseTrainer) -> None:
    """Give a trainer state once: restore `base` attaching to that node (no new node, no status change), else set up."""
    if trainer.state is not None:
        return
    if trainer.base is None or isinstance(trainer, AnalysisBase):
        trainer.setup()
        return
    path = trainer.store.checkpoint(trainer.base)
    if path is None:
        raise UsageError(f"node {trainer.base} has no checkpoint to restore; nodes with checkpoints: `lenscope ls --checkpoint`")
    state = trainer.init_state(jax.random.PRNGKey(trainer.args.seed))
    trainer.state = place_state(trainer.surgery(state, read_checkpoint(path)))
    trainer.lineage = Lineage.attach(trainer.store, trainer.base, writer=trainer.is_writer)
    trainer._checkpoints = CheckpointWriter()


def enable_compilation_cache(path: str | os.PathLike) -> Path:
    """Use JAX's persistent compilation cache in `path` (every program, however small) so later processes skip compiling."""
    folder = Path(path).expanduser().absolute()
    folder.mkdir(parents=True, exist_ok=True)
    if jax.config.jax_compilation_cache_dir != str(folder):
        from jax.experimental.compilation_cache import compilation_cache

        jax.config.update("jax_compilation_cache_dir", str(folder))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
        # JAX decides once per process whether to use the cache; start over so the new folder takes effect.
        compilation_cache.reset_cache()
    return folder


def _output_lineage(trainer: BaseTrainer, cfg: AnalysisCfg, name: str) -> Lineage | None:
    """Where results go when cfg.output_store is set: a node of the trainer's store, or a new node in another store."""
    from ..store import Node, Store

    spec = cfg.output_store
    if spec is None:
        return None
    if isinstance(spec, Node) or (isinstance(spec, str) and "@" in spec):
        node = trainer.store.get(spec).node
        return Lineage.attach(trainer.store, node, writer=trainer.is_writer)
    store = spec if isinstance(spec, Store) else Store(spec, readonly=not trainer.is_writer)
    if not trainer.is_writer:
        return Lineage.attach(store, trainer.node, writer=False)
    node = store.new_node(name, config={"source": str(trainer.node), "analysis": name})
    store.set_status(node, "done")
    return Lineage.attach(store, node, writer=True)


def bind(trainer: BaseTrainer, cfg: AnalysisCfg) -> AnalysisBase:
    """The analysis of `cfg` as a view on `trainer` (state and node read from it), made once per cfg and reused."""
    cls = combined_class(cfg.resolve(), type(trainer))
    params = resolve_params(cls, cfg)
    views = trainer.__dict__.setdefault("_analysis_views", {})
    key = (cls, repr(cfg))
    view = views.get(key)
    if view is None:
        name = cfg.result_name(cls)
        view = cls.from_trainer(trainer)
        lineage = _output_lineage(trainer, cfg, name)
        if lineage is not None:  # own node: the view keeps the trainer's state but writes elsewhere
            view.__dict__["_view_of"] = None
            view.state, view.lineage = trainer.state, lineage
        view.analysis_cfg, view._params = cfg, params
        if cfg.name:
            view.NAME = cfg.name
        if cfg.split:
            view.SPLIT = cfg.split
        views[key] = view
    return view


def input_store_of(analysis: AnalysisBase) -> tuple[Any, str] | None:
    """(node, artifact name) of the analysis's input table: cfg.input_store, else the class INPUT_STORE."""
    cfg = getattr(analysis, "analysis_cfg", None)
    spec = cfg.input_store if cfg is not None and cfg.input_store is not None else getattr(analysis, "INPUT_STORE", None)
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


def prepare(analysis: AnalysisBase, analysis_inputs: Mapping[str, Any] | None = None) -> AnalysisBase:
    """Make the caller's inputs and the input table (if any) available as analysis_inputs / input_dataset."""
    if analysis_inputs is not None:
        analysis.analysis_inputs = dict(analysis_inputs)
    if input_store_of(analysis) is not None:
        analysis.input_dataset = load_input(analysis)
    return analysis


def analysis_for(obj: Any, cfg: Any = None, analysis_inputs: Mapping[str, Any] | None = None) -> AnalysisBase:
    """The analysis to run: `obj` itself (an analysis, no cfg), or `cfg` bound to the trainer `obj`, with state."""
    if cfg is None:
        if not isinstance(obj, AnalysisBase):
            raise UsageError(f"{type(obj).__name__} is a trainer: pass analysis_cfg=AnalysisCfg('<analysis name>') "
                             "to choose the analysis")
        if obj.state is None:
            ensure_state(obj)
        return prepare(obj, analysis_inputs) if analysis_inputs is not None else obj
    if not isinstance(obj, BaseTrainer):
        raise UsageError(f"expected a trainer or an analysis, got {type(obj).__name__}")
    cfg = coerce_cfg(cfg)
    if cfg.cache_dir is not None:
        enable_compilation_cache(cfg.cache_dir)
    ensure_state(obj)
    return prepare(bind(obj, cfg), analysis_inputs)


def _batch(analysis: AnalysisBase, batch: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return analysis.analysis_batch() if batch is None else batch


def execute_analysis_op(obj: Any, batch: Mapping[str, Any] | None = None, analysis_cfg: Any = None,
                        analysis_inputs: Mapping[str, Any] | None = None) -> Any:
    """One batch's results in memory (NumPy, gathered across processes); batch None = the analysis batch."""
    analysis = analysis_for(obj, analysis_cfg, analysis_inputs)
    return analysis.compute(_batch(analysis, batch))


def default_columns(schema: Mapping[str, Any], results: Any, batch: Mapping[str, Any]) -> dict[str, Any]:
    """Table columns of one batch: analyze()'s mapping, plus schema columns taken from same-named batch fields."""
    if not isinstance(results, Mapping):
        raise UsageError(f"a table analysis's analyze() must return a mapping column -> [examples, ...] arrays, "
                         f"got {type(results).__name__}; schema columns: {', '.join(schema)}")
    columns = dict(results)
    for name in schema:
        if name not in columns and name in batch:
            columns[name] = to_host(batch[name])
    return columns


def execute_analysis_step(obj: Any, batch: Mapping[str, Any] | None = None, analysis_cfg: Any = None,
                          analysis_inputs: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """Serialized rows (one dict per example) of one batch of a table analysis, validated against its schema."""
    analysis = analysis_for(obj, analysis_cfg, analysis_inputs)
    schema = parse_schema(analysis.output_schema())
    if schema is None:
        raise UsageError(f"{type(analysis).__name__} ({analysis.NAME}) declares no output schema; set SCHEMA or "
                         "AnalysisCfg(output_schema=...) to get rows, or use execute_analysis_op")
    batch = _batch(analysis, batch)
    results = analysis.compute(batch)
    custom = getattr(analysis, "columns", None)
    columns = custom(results, batch) if callable(custom) else default_columns(schema, results, batch)
    yield from batch_rows(schema, columns)
