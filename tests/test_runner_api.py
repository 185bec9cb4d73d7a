"""The seed-002 runner surface: entry points and phases, hooks, AnalysisCfg(target_op, step_fn, apply,
cache_dir), execute_analysis_op/step, the analysis store, top-level ops, concept_direction, table artifact names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lenscope
from lenscope import AnalysisBatch, AnalysisCfg, AnalysisResults, Phase
from lenscope.analysis.builtin.concept import ConceptDirection, concept_direction
from lenscope.errors import ConfigError, UsageError
from lenscope.examples.grokking import GrokTrainer
from lenscope.examples.grokking_analyses import SummaryAnalysis
from lenscope.store import Store


@pytest.fixture(scope="module")
def base(trained_base):
    """A 20-step grokking run with a checkpoint on its last node (a copy of the worker's), shared by this module."""
    return trained_base.root, trained_base.sources, trained_base.node


def fresh(base: tuple, cls: type = GrokTrainer) -> Any:
    """A new trainer on the base checkpoint (analyses attach to that node)."""
    root, tiny, node = base
    return cls(tiny, base=node, store=root / "runs")


def positive_label(trainer: Any) -> int:
    """A label present in the first validation batch, so concept_direction has both classes."""
    return int(np.asarray(trainer.batch("validation", 0)["labels"])[0])


# -- the seed's snippets, adapted only in the package and module names -----------------------------
def test_seed_session_runner_entry_points(tiny, store_root):
    run_cfg = tiny + ["training/steps=4", "logging/validation_interval=0", "logging/checkpoint_interval=0"]
    runner = GrokTrainer(run_cfg, store=store_root)
    runner.test()   # Dispatches core_test_loop
    runner.train()  # Dispatches core_train_loop
    assert int(runner.state.step) == 4 and runner.phase is None


def test_seed_execution_helpers_and_top_level_ops(base):
    import lenscope as it
    import lenscope.analysis  # ensure op wrappers are registered  # noqa: F401
    from lenscope.analysis import AnalysisCfg, execute_analysis_op, execute_analysis_step

    module = fresh(base)
    module.setup(attach=True)
    batch = module.batch("validation", 0)
    label = positive_label(module)
    my_cfg = AnalysisCfg(target_op=it.concept_direction, params={"positive": label})
    my_inputs = None
    result = execute_analysis_op(
        module,
        batch,
        batch_idx=0,
        analysis_cfg=my_cfg,          # AnalysisCfg with a resolved op
        analysis_inputs=my_inputs,    # optional AnalysisInputs or dict
    )
    assert isinstance(result, AnalysisBatch) and result.batch_idx == 0
    for row in execute_analysis_step(module, batch, batch_idx=0, analysis_cfg=my_cfg):
        print(row)  # serialized dict suitable for Dataset.from_generator
        assert set(row) == {"projection", "label"}
    result = it.concept_direction(module, positive=label)
    assert result.direction.shape == (module.args.d_model,)
    cfg = AnalysisCfg(
        target_op=it.concept_direction,
        params={"positive": label},
    )
    inputs = {"direction": np.eye(module.args.d_model, dtype=np.float32)[0]}
    result = execute_analysis_op(module, batch, analysis_cfg=cfg, analysis_inputs=inputs)
    np.testing.assert_allclose(result.projection, result.activations[:, 0], rtol=1e-6)


def test_seed_analysis_runner_run_analysis(base):
    runner = fresh(base)
    cfg = AnalysisCfg(target_op=lenscope.ops.concept_direction, params={"positive": positive_label(runner)})
    store = runner.run_analysis(cfg)   # Analysis-specific
    assert isinstance(store, AnalysisResults) and store.node == base[2]
    assert store.dataset.num_rows == runner.data.size("validation") and store.results is None
    assert store.artifacts == ("concept_direction", "concept_direction.parquet")


# -- entry points, phases and hooks ------------------------------------------------------------------
class HookTrainer(GrokTrainer):
    """Records each hook with the phase it saw."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.events: list[tuple] = []

    def _note(self, *event: Any) -> None:
        self.events.append((*event, self.phase))

    def on_train_epoch_start(self, epoch: int) -> None:
        """Record."""
        self._note("epoch_start", epoch, int(self.state.step))

    def on_train_epoch_end(self, epoch: int) -> None:
        """Record."""
        self._note("epoch_end", epoch, int(self.state.step))

    def on_test_batch_start(self, batch: Any, batch_idx: int) -> None:
        """Record."""
        self._note("test_batch", batch_idx)

    def on_train_session_end(self) -> None:
        """Record."""
        self._note("train_session_end")

    def on_test_session_end(self) -> None:
        """Record."""
        self._note("test_session_end")

    def on_analysis_session_end(self) -> None:
        """Record."""
        self._note("analysis_session_end")


def test_phases_epoch_hooks_test_batches_and_session_ends(tiny, store_root):
    trainer = HookTrainer(tiny + ["training/steps=8", "training/batch_size=64", "logging/validation_interval=0",
                                  "logging/checkpoint_interval=8"], store=store_root)
    trainer.train()
    assert trainer.data.num_batches("train") == 4  # 264 training examples, batches of 64: an epoch is four steps
    train = [e for e in trainer.events if e[0].startswith("epoch")]
    assert train == [("epoch_start", 0, 0, Phase.TRAIN), ("epoch_end", 0, 4, Phase.TRAIN),
                     ("epoch_start", 1, 4, Phase.TRAIN), ("epoch_end", 1, 8, Phase.TRAIN)]
    assert trainer.events[-1] == ("train_session_end", None)
    trainer.events.clear()
    trainer.test()
    assert trainer.events == [("test_batch", 0, Phase.TEST), ("test_batch", 1, Phase.TEST),
                              ("test_session_end", None)]
    trainer.events.clear()
    trainer.run_analysis("activation_stats")
    assert trainer.events == [("analysis_session_end", None)] and trainer.phase is None


def test_run_is_what_train_runs_and_the_phase_shows_inside(tiny, store_root):
    seen = []

    class Seeing(GrokTrainer):
        def on_train_start(self) -> None:
            seen.append(self.phase)

    Seeing(tiny + ["training/steps=2", "logging/validation_interval=0"], store=store_root).run()
    assert seen == [Phase.TRAIN]


def test_a_standalone_analysis_run_is_in_the_analysis_phase(base):
    seen = []

    class Watching(SummaryAnalysis):
        NAME = "watching_summary"

        def on_analysis_start(self) -> None:
            seen.append(("start", self.phase))

        def on_analysis_session_end(self) -> None:
            seen.append(("session_end", self.phase))

    analysis = fresh(base, Watching)
    analysis.run()
    assert seen == [("start", Phase.ANALYSIS), ("session_end", None)] and analysis.phase is None


# -- AnalysisCfg -------------------------------------------------------------------------------------
def test_target_op_forms_and_errors():
    assert AnalysisCfg(target_op=lenscope.ops.activation_stats).analysis == "activation_stats"
    assert AnalysisCfg(target_op="weight_spectrum") == AnalysisCfg("weight_spectrum")
    assert AnalysisCfg(target_op=ConceptDirection).target_op is ConceptDirection
    assert AnalysisCfg.from_dict({"target_op": "activation_stats"}).analysis == "activation_stats"
    with pytest.raises(ConfigError, match="give one"):
        AnalysisCfg("activation_stats", target_op="weight_spectrum")
    with pytest.raises(ConfigError, match="step_fn"):
        AnalysisCfg("activation_stats", step_fn="not a name")


def test_apply_attaches_the_cfg_and_generates_analysis_step(base):
    trainer = fresh(base)
    cfg = AnalysisCfg(target_op="concept_direction", params={"positive": positive_label(trainer)})
    assert cfg.apply(trainer) is trainer and trainer.analysis_cfg is cfg
    rows = list(trainer.analysis_step(batch_idx=0))
    assert len(rows) == trainer.data.global_batch_size("validation")
    batch = lenscope.execute_analysis_op(trainer)  # the cfg apply() attached
    assert isinstance(batch, AnalysisBatch) and batch["projection"].shape == (len(rows),)
    np.testing.assert_allclose([r["projection"] for r in rows], batch.projection, rtol=1e-6)


class OwnStep(GrokTrainer):
    """A trainer with its own step function: one row per example of the batch, the label doubled."""

    def label_step(self, batch: Any, batch_idx: int) -> Any:
        """Rows of the batch, made here instead of by the op."""
        for label in np.asarray(batch["labels"]).tolist():
            yield {"projection": float(batch_idx), "label": 2 * label}


def test_step_fn_names_the_trainers_own_step(base):
    trainer = fresh(base, OwnStep)
    out = trainer.run_analysis(AnalysisCfg("concept_direction", step_fn="label_step", name="own"))
    labels = np.asarray(trainer.data.splits["validation"]["labels"])
    assert out["own"]["label"] == (2 * labels).tolist()
    with pytest.raises(UsageError, match="has no method 'lable_step'.*label_step"):
        trainer.run_analysis(AnalysisCfg("concept_direction", step_fn="lable_step"))
    before = OwnStep.label_step
    AnalysisCfg("activation_stats", step_fn="label_step").apply(trainer)
    assert type(trainer).label_step is before  # apply never replaces a step the trainer defines


# -- execute_analysis_op: AnalysisBatch, batch_idx, analysis_inputs ------------------------------------
def test_analysis_batch_access_batch_idx_and_scoped_inputs(base):
    trainer = fresh(base, GrokTrainer)
    trainer.setup(attach=True)
    stats = lenscope.execute_analysis_op(trainer, batch_idx=0, analysis_cfg=AnalysisCfg("activation_stats"))
    assert stats["embed"] is stats.embed and set(stats.embed) == {"mean", "std", "norm", "dead_fraction"}
    assert isinstance(stats.embed["mean"], np.ndarray) and "embed" in repr(stats)
    with pytest.raises(AttributeError, match="no output 'embedd'.*embed"):
        stats.embedd  # noqa: B018
    cfg = AnalysisCfg("concept_direction", params={"positive": positive_label(trainer)})
    unit = np.eye(trainer.args.d_model, dtype=np.float32)[3]
    given = lenscope.execute_analysis_op(trainer, analysis_cfg=cfg, analysis_inputs={"direction": unit})
    np.testing.assert_array_equal(given.direction, unit)
    again = lenscope.execute_analysis_op(trainer, analysis_cfg=cfg)  # the inputs held for that call only
    assert not np.array_equal(again.direction, unit)
    np.testing.assert_allclose(np.linalg.norm(again.direction), 1.0, rtol=1e-5)


# -- cache_dir: intermediate results reused by a rerun on the same node ---------------------------------
class CountingConcept(ConceptDirection):
    """concept_direction counting the batches it turns into rows."""

    NAME = "counting_concept"
    CALLS: list = []

    def columns(self, results: Any, batch: Any) -> dict[str, Any]:
        """Count, then the columns."""
        self.CALLS.append(1)
        return super().columns(results, batch)


def test_cache_dir_reuses_table_shards_on_the_same_node(base, tmp_path):
    cache = tmp_path / "cache"
    tables = []
    for _ in range(2):
        trainer = fresh(base)
        cfg = AnalysisCfg(CountingConcept, cache_dir=cache, params={"positive": positive_label(trainer)})
        tables.append(trainer.run_analysis(cfg).dataset)
    assert len(CountingConcept.CALLS) == 1  # the second run read the shard
    assert tables[0]["projection"] == tables[1]["projection"]
    assert len(list((cache / "tables").rglob("batch_*.parquet"))) == 1


# -- top level, concept_direction, table artifact names -----------------------------------------------
def test_op_wrappers_at_top_level_are_the_ops_wrappers():
    assert lenscope.activation_stats is lenscope.ops.activation_stats
    assert lenscope.concept_direction is lenscope.ops.concept_direction
    assert "concept_direction" not in lenscope.__all__  # ops are dynamic: dir(lenscope.ops) lists them
    with pytest.raises(AttributeError, match="no attribute 'activation_stat'"):
        lenscope.activation_stat  # noqa: B018


def test_concept_direction_is_the_normalized_difference_of_class_means():
    acts = np.array([[1.0, 0.0], [3.0, 0.0], [0.0, 1.0], [0.0, 3.0]], np.float32)
    direction = concept_direction(acts, np.array([True, True, False, False]))
    np.testing.assert_allclose(direction, np.array([2.0, -2.0]) / np.sqrt(8), rtol=1e-6)
    with pytest.raises(UsageError, match="both classes"):
        concept_direction(acts, np.ones(4, bool))


def test_table_figure_is_artifact_name_and_table_is_name_parquet(base):
    trainer = fresh(base)
    out = trainer.run_analysis(AnalysisCfg("concept_direction", name="cd",
                                           params={"positive": positive_label(trainer)}))
    entry = out.entry("cd")
    store = Store(base[0] / "runs")
    assert store.artifact(entry.node, "cd").filename == "cd.pdf"
    assert store.artifact(entry.node, "cd.parquet").filename == "cd.parquet"
    assert lenscope.load_table(store, entry.node, "cd").num_rows == entry.dataset.num_rows
    assert Path(trainer.results_dir(entry.node) / "cd.parquet").is_file()
