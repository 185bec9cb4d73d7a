"""Tandem analyses (A9): borrowed views, validation cadence, compile once, failures, lookup by lineage."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import jax
import numpy as np
import pytest
from cli_runner import run_cli
from conftest import TINY, xla_compilations

from lenscope.analysis import AnalysisBase
from lenscope.config import field
from lenscope.errors import ConfigError
from lenscope.examples.grokking import GrokConfig, GrokTrainer
from lenscope.examples.grokking_analyses import (
    AttentionAnalysis,
    FourierAnalysis,
    SummaryAnalysis,
    embedding_spectrum,
)
from lenscope.models import Transformer
from lenscope.runner import run_job
from lenscope.store import Node, Store

NAMES = ("attention", "fourier", "summary")
EVERY_5 = ["training/steps=20", "logging/validation_interval=5", "logging/checkpoint_interval=5"]


def counting(cls: type) -> type:
    """`cls` with a count of how often select() and analyze() run (analyze runs once per trace).

    Its plot() is a small JSON naming the node, so a test of many runs does not render PDFs.
    """

    class Counting(cls):
        selected = 0
        traced = 0
        tracing_threads: ClassVar[list[str]] = []

        def select(self, paths):
            type(self).selected += 1
            return super().select(paths)

        def analyze(self, layer, inputs):
            type(self).traced += 1
            type(self).tracing_threads.append(threading.current_thread().name)
            return super().analyze(layer, inputs)

        def plot(self, results):
            return {"node": str(self.node)}

    Counting.__name__ = Counting.__qualname__ = f"Counting{cls.__name__}"
    return Counting


def host(*analyses: type, config: type = GrokConfig) -> type:
    """A grokking trainer declaring `analyses` as its tandem analyses."""
    return type("Host", (GrokTrainer,), {"ANALYSIS": tuple(analyses), "CONFIG": config})


class Broken(AnalysisBase[GrokConfig, Transformer], GrokTrainer):
    """An analysis with a bug: analyze() raises while being traced."""

    NAME = "broken"

    def select(self, paths):
        return "embed"

    def analyze(self, layer, inputs):
        raise ValueError("spectrum exploded")


@pytest.fixture(scope="module")
def tandem_run(tmp_path_factory):
    """One grokking run of 20 steps with the default tandem analyses every 5 steps."""
    root = tmp_path_factory.mktemp("tandem")
    trainer = GrokTrainer(TINY + EVERY_5 + [f"logging/results={root / 'results'}"], store=root / "runs")
    node = run_job(trainer)
    store = Store(root / "runs")
    yield SimpleNamespace(trainer=trainer, node=node, store=store, root=root)
    store.close()


def test_view_borrows_node_and_state_across_donated_steps(tiny, store_root):
    trainer = GrokTrainer(tiny, store=store_root)
    trainer.setup()
    nodes = trainer.store.query().count()
    view = FourierAnalysis.from_trainer(trainer)
    assert trainer.store.query().count() == nodes and "_own_state" not in view.__dict__
    assert view.store is trainer.store and view.args is trainer.args and view.model is trainer.model
    assert view.state is trainer.state and view.node == trainer.node
    spectra = []
    for step in range(3):
        old = trainer.state
        trainer.state, _ = trainer._train_step(trainer.state, trainer.batch("train", step))
        trainer.tick()
        assert view.state is trainer.state and view.state is not old
        assert view.node == trainer.node and view.node.seq == step + 1
        assert all(leaf.is_deleted() for leaf in jax.tree.leaves(old.params))  # the jit step donated it
        expected = embedding_spectrum(trainer.state.params["embed"]["embedding"], trainer.args.p)
        spectra.append(view.compute()["norm"])
        np.testing.assert_allclose(spectra[-1], np.asarray(expected), rtol=1e-6)
    assert not np.allclose(spectra[0], spectra[-1])
    assert view.compilations == 1
    trainer.cleanup()


def test_view_refuses_setup_tick_state_replacement_and_cleanup(tiny, store_root):
    trainer = GrokTrainer(tiny, store=store_root)
    trainer.setup()
    state, node = trainer.state, trainer.node
    view = SummaryAnalysis.from_trainer(trainer)
    why = "borrowed view of GrokTrainer"
    with pytest.raises(RuntimeError, match=f"{why}: it cannot set up; the trainer owns setup, ticking and cleanup"):
        view.setup()
    with pytest.raises(RuntimeError, match=f"{why}: it cannot tick"):
        view.tick()
    with pytest.raises(RuntimeError, match="borrowed view: the trainer alone replaces its state"):
        view.state = trainer.init_state(jax.random.PRNGKey(1))
    with pytest.raises(RuntimeError, match=f"{why}: it cannot clean up"):
        view.cleanup()
    assert trainer.state is state and trainer.node == node and trainer._checkpoints is not None
    trainer.cleanup()


def test_cadence_one_artifact_per_analysis_per_validation_on_its_node(tandem_run):
    store, node = tandem_run.store, tandem_run.node
    assert node.seq == 20 and store.status(node) == "done"
    assert [n.seq for n in store.query().nonce(node.nonce).sort("seq").all()] == list(range(21))
    for name in NAMES:
        rows = store.query().nonce(node.nonce).artifact(name).sort("seq").select()
        assert [r["seq"] for r in rows] == [5, 10, 15, 20], name
        for row in rows:
            saved = tandem_run.root / "results" / node.name / node.nonce / str(row["seq"]) / row["filename"]
            assert saved.read_bytes() == row["payload"].content
    for row in store.query().nonce(node.nonce).artifact("summary").select():
        summary = json.loads(row["payload"].content)
        assert (summary["node"], summary["seq"]) == (row["node"], row["seq"])
    assert store.query().nonce(node.nonce).where("val/loss", ">=", 0).count() == 4


def test_default_run_compiled_each_analysis_once(tandem_run):
    views = tandem_run.trainer._tandem.views
    assert sorted(v.NAME for v in views) == sorted(NAMES)
    assert [v.compilations for v in views] == [1, 1, 1]


def test_analyses_compile_quickly_unless_they_set_their_own_options(tiny, store_root):
    trainer = GrokTrainer(tiny, store=store_root)
    trainer.setup()
    view = FourierAnalysis.from_trainer(trainer)
    assert view.compiler_options() == {"xla_backend_optimization_level": 0}

    class Optimized(FourierAnalysis):
        COMPILER_OPTIONS: ClassVar[dict] = {}

    class Misspelled(FourierAnalysis):
        COMPILER_OPTIONS: ClassVar[dict] = {"xla_backend_optimisation_level": 3}

    assert Optimized.from_trainer(trainer).compiler_options() == {}
    with pytest.raises(Exception, match="No such compile option: 'xla_backend_optimisation_level'"):
        Misspelled.from_trainer(trainer).compute()  # the options reach XLA
    standalone = FourierAnalysis(tiny, store=store_root)
    assert standalone.compiler_options() == {"xla_backend_optimization_level": 0}  # the same options
    np.testing.assert_allclose(view.compute()["norm"], Optimized.from_trainer(trainer).compute()["norm"], rtol=1e-6)
    trainer.cleanup()


def test_twenty_tandem_runs_compile_once_per_analysis(tiny, store_root):
    analyses = [counting(FourierAnalysis), counting(AttentionAnalysis), counting(SummaryAnalysis)]
    trainer = host(*analyses)(tiny, store=store_root)
    trainer.setup()
    for step in range(20):
        trainer.state, _ = trainer._train_step(trainer.state, trainer.batch("train", step))
        trainer.tick()
        trainer.run_tandem()
    assert [v.compilations for v in trainer._tandem.views] == [1, 1, 1]
    assert [(cls.selected, cls.traced) for cls in analyses] == [(1, 1)] * 3
    trainer.cleanup()  # waits for the last figures
    rows = trainer.store.query().nonce(trainer.node.nonce).artifact().select()
    assert len(rows) == 60 and {r["seq"] for r in rows} == set(range(1, 21))
    for row in rows:  # saved while training went on, each on the node it was computed on
        assert json.loads(row["payload"].content)["node"] == row["node"]


def test_training_compiles_views_ahead_and_reuses_that_trace(tiny, store_root):
    analyses = [counting(FourierAnalysis), counting(AttentionAnalysis), counting(SummaryAnalysis)]
    trainer = host(*analyses)(tiny + ["logging/validation_interval=10"], store=store_root)
    with xla_compilations() as compiled:
        node = run_job(trainer)
    assert [(cls.selected, cls.traced) for cls in analyses] == [(1, 1)] * 3
    assert [cls.tracing_threads for cls in analyses] == [["lenscope-tandem-compile"]] * 3
    assert [v.compilations for v in trainer._tandem.views] == [1, 1, 1]
    # XLA compiled each capture function once, ahead, and the validations called that executable
    assert [entry for entry in compiled if entry[0].startswith("capture")] == [
        ("capture_analyze", "lenscope-tandem-compile")] * 3
    rows = trainer.store.query().nonce(node.nonce).artifact().select()
    assert sorted((r["seq"], r["name"]) for r in rows) == sorted((s, cls.NAME) for s in (10, 20, 30, 40)
                                                                for cls in analyses)


class Wrapped(SummaryAnalysis):
    """A tandem analysis overriding run(): records each call, then runs the default."""

    NAME = "wrapped"
    calls: ClassVar[list[tuple[int, str]]] = []

    def run(self):
        type(self).calls.append((self.node.seq, threading.current_thread().name))
        return super().run()


class Replaced(SummaryAnalysis):
    """A tandem analysis whose run() replaces the default entirely: one value, no figure."""

    NAME = "replaced"
    calls: ClassVar[list[int]] = []

    def run(self):
        type(self).calls.append(self.node.seq)
        self.lineage.record({"replaced/seq": self.node.seq})


def test_an_overridden_run_is_called_once_per_validation(tiny, store_root):
    Wrapped.calls.clear()
    Replaced.calls.clear()
    node = run_job(host(Wrapped, Replaced), tiny + ["logging/validation_interval=10"], store=store_root)
    assert Wrapped.calls == [(10, "MainThread"), (20, "MainThread"), (30, "MainThread"), (40, "MainThread")]
    assert Replaced.calls == [10, 20, 30, 40]
    store = Store(store_root)
    rows = store.query().nonce(node.nonce).artifact("wrapped").sort("seq").select()
    assert [r["seq"] for r in rows] == [10, 20, 30, 40]  # super().run() still publishes, each on its node
    assert all(json.loads(r["payload"].content)["seq"] == r["seq"] for r in rows)
    replaced = store.query().nonce(node.nonce).where("replaced/seq", ">=", 0).sort("seq").all()
    assert [store.values(n)["replaced/seq"] for n in replaced] == [10, 20, 30, 40]
    assert store.query().nonce(node.nonce).artifact("replaced").count() == 0
    store.close()


def test_analyze_false_traces_nothing_and_writes_nothing(tiny, store_root, tmp_path):
    analyses = [counting(FourierAnalysis), counting(SummaryAnalysis)]
    trainer = host(*analyses)(tiny + ["training/analyze=false"], store=store_root)
    node = run_job(trainer)
    assert node.seq == 40 and trainer.store.status(node) == "done"
    assert trainer._tandem._views is None
    assert [(cls.selected, cls.traced) for cls in analyses] == [(0, 0), (0, 0)]
    assert trainer.store.query().artifact().count() == 0
    assert trainer.store.query().where("val/loss", ">=", 0).count() == 2
    assert not (tmp_path / "results").exists()


def test_name_collision_fails_at_construction_and_writes_nothing(tiny, store_root):
    class Twin(AnalysisBase[GrokConfig, Transformer], GrokTrainer):
        NAME = "fourier"

    with pytest.raises(ConfigError, match="FourierAnalysis and Twin share NAME 'fourier'"):
        host(FourierAnalysis, Twin)(tiny, store=store_root)
    assert not store_root.exists()


def test_unnamed_tandem_analysis_fails_at_construction(tiny, store_root):
    class Nameless(AnalysisBase[GrokConfig, Transformer], GrokTrainer):
        pass

    with pytest.raises(ConfigError, match="Nameless.NAME must be a nonempty plain name"):
        host(Nameless)(tiny, store=store_root)
    assert not store_root.exists()


@dataclass
class WindowConfig:
    """A setting only the windowed analysis reads."""

    window: int = field("analysis/window", default=3, help="frequencies per window")


@dataclass
class WindowedConfig(GrokConfig, WindowConfig):
    """The grokking config composed with the windowed analysis's."""


class Windowed(AnalysisBase[WindowedConfig, Transformer], GrokTrainer):
    """An analysis reading a config path the plain grokking trainer lacks."""

    CONFIG = WindowedConfig
    NAME = "windowed"


def test_missing_config_field_names_path_and_class_to_inherit(tiny, store_root):
    message = ("Host.CONFIG lacks 'analysis/window', read by tandem analysis Windowed; "
               r"compose it explicitly: @dataclass class ...\(GrokConfig, WindowConfig\)")
    with pytest.raises(ConfigError, match=message):
        host(Windowed)(tiny, store=store_root)
    assert not store_root.exists()
    trainer = host(Windowed, config=WindowedConfig)(tiny, store=store_root)
    assert trainer.args.window == 3


def test_failing_analysis_is_recorded_and_training_completes(tiny, store_root, caplog):
    caplog.set_level(logging.ERROR, logger="lenscope.tandem")
    node = run_job(host(Broken, SummaryAnalysis), tiny, store=store_root)
    store = Store(store_root)
    assert node.seq == 40 and store.status(node) == "done" and store.checkpoint(node) is not None
    errors = store.query().nonce(node.nonce).where("tandem/broken/error", "==", "ValueError: spectrum exploded")
    assert [n.seq for n in errors.sort("seq").all()] == [20, 40]
    for name in ("broken.error", "summary"):
        assert [r["seq"] for r in store.query().nonce(node.nonce).artifact(name).sort("seq").select()] == [20, 40]
    text = store.artifact(node, "broken.error")["content"].decode()
    assert text.startswith("Traceback") and "spectrum exploded" in text and "in analyze" in text
    # the traceback once, then one line per failure, then a summary at the end of the run
    first, again, summary = [r.getMessage() for r in caplog.records if r.name == "lenscope.tandem"]
    assert first.startswith(f"tandem analysis broken failed at {node.name}@{node.nonce}:20") and "Traceback" in first
    assert again == f"tandem analysis broken failed again at {node}: ValueError: spectrum exploded"
    assert summary.startswith("tandem analyses failed during this run: broken at 2 of 2 validations "
                              f"(first {node.name}@{node.nonce}:20, last {node}: ValueError: spectrum exploded)")
    assert "lenscope ls --artifact NAME.error" in summary and "summary" not in summary.split("run:")[1]
    store.close()


def test_failing_plot_is_recorded_on_the_node_it_was_computed_on(tiny, store_root):
    class BadPlot(SummaryAnalysis):
        NAME = "badplot"

        def plot(self, results):
            raise KeyError(f"no figure at {self.node}")

    node = run_job(host(BadPlot, FourierAnalysis), tiny, store=store_root)
    store = Store(store_root)
    assert store.status(node) == "done"
    for seq in (20, 40):
        at = Node(node.name, node.nonce, seq)
        assert store.values(at)["tandem/badplot/error"] == f"KeyError: 'no figure at {at}'"
        assert "in plot" in store.artifact(at, "badplot.error")["content"].decode()
        assert store.artifact(at, "fourier")["filename"] == "fourier.pdf"
    store.close()


def test_strict_failing_analysis_stops_training_and_marks_node_failed(tiny, store_root):
    with pytest.raises(ValueError, match="spectrum exploded"):
        run_job(host(Broken), tiny + ["training/analyze_strict=true"], store=store_root)
    store = Store(store_root)
    failed = store.query().where("status", "==", "failed").all()
    assert [n.seq for n in failed] == [20]
    assert max(n.seq for n in store.query().all()) == 20
    assert "val/loss" in store.values(failed[0]) and store.query().artifact().count() == 0
    store.close()


def _cli(*args: str) -> str:
    """`lenscope ARGS`' stdout, run in this process (tests/cli_runner.py)."""
    done = run_cli(*args, cwd=Path.cwd())
    assert done.rc == 0, done.err
    return done.out


def test_one_analysis_across_a_lineage_in_seq_order_from_python_and_cli(tandem_run):
    store, node = tandem_run.store, tandem_run.node
    rows = store.query().nonce(node.nonce).artifact("fourier").sort("seq").select()
    assert [(r["seq"], r["filename"]) for r in rows] == [(s, "fourier.pdf") for s in (5, 10, 15, 20)]
    runs = str(tandem_run.root / "runs")
    listed = json.loads(_cli("ls", "--lineage", str(node), "--artifact", "fourier", "--json", "--store", runs))
    assert [(r["node"], r["name"]) for r in listed] == [(str(Node(node.name, node.nonce, s)), "fourier")
                                                       for s in (5, 10, 15, 20)]
    text = _cli("show", str(Node(node.name, node.nonce, 15)), "--store", runs)
    assert all(f"{name}.{ext}" in text for name, ext in zip(NAMES, ("pdf", "pdf", "json")))

