"""The analysis hooks run each definition once per analysis run whether or not an override calls `super()`:
on a trainer's subclass, on an analysis over it, and on a standalone analysis (docs/analysis.md)."""

from __future__ import annotations

from typing import Any

from conftest import TINY

from lenscope.analysis import AnalysisBase
from lenscope.analysis.builtin.activations import ActivationStats
from lenscope.examples.grokking import GrokTrainer

QUIET = TINY + ["training/analyze=false"]
RUN = ["start", "epoch_end", "end"]


class Parent(GrokTrainer):
    """A trainer writing the three analysis hooks."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.events: list[str] = []
        super().__init__(*args, **kwargs)

    def on_analysis_start(self) -> None:
        self.events.append("parent.start")

    def on_analysis_epoch_end(self, results: Any) -> None:
        self.events.append("parent.epoch_end")

    def on_analysis_end(self, results: Any) -> None:
        self.events.append("parent.end")


class Child(Parent):
    """Its subclass, whose hooks call super() first, as Python code usually does."""

    def on_analysis_start(self) -> None:
        super().on_analysis_start()
        self.events.append("child.start")

    def on_analysis_epoch_end(self, results: Any) -> None:
        super().on_analysis_epoch_end(results)
        self.events.append("child.epoch_end")

    def on_analysis_end(self, results: Any) -> None:
        super().on_analysis_end(results)
        self.events.append("child.end")


class PoliteStats(ActivationStats):
    """activation_stats whose hooks call super() (on a view, that reaches the trainer's definitions)."""

    NAME = "polite_stats"

    def on_analysis_start(self) -> None:
        super().on_analysis_start()
        self.holder.trainer.events.append("analysis.start")

    def on_analysis_end(self, results: Any) -> None:
        super().on_analysis_end(results)
        self.holder.trainer.events.append("analysis.end")


def _both(*owners: str) -> list[str]:
    return [f"{owner}.{hook}" for hook in RUN for owner in owners]


def test_a_trainer_hook_that_calls_super_runs_its_parent_once(tiny, store_root):
    trainer = Child(QUIET + tiny[len(TINY):], store=store_root)
    try:
        trainer.run_analysis("activation_stats")
        assert trainer.events == _both("parent", "child")
        trainer.events.clear()
        trainer.run_analysis(PoliteStats)  # the analysis's super() reaches Child's hooks, which already ran
        assert trainer.events == ["parent.start", "child.start", "analysis.start", "parent.epoch_end",
                                  "child.epoch_end", "parent.end", "child.end", "analysis.end"]
    finally:
        trainer.cleanup()
    trainer.events.clear()
    trainer.on_analysis_start()  # called directly, outside a run: plain Python, super() included
    assert trainer.events == ["parent.start", "child.start"]


def test_a_standalone_analysis_s_super_calls_run_each_definition_once(tiny, store_root):
    class Standalone(AnalysisBase, Child):
        NAME = "standalone_super"

        def select(self, paths: list[str]) -> str:
            return "embed"

        def analyze(self, layer: Any, inputs: Any) -> Any:
            return {"n": inputs[next(iter(inputs))].sum()}

        def on_analysis_start(self) -> None:
            super().on_analysis_start()
            self.events.append("analysis.start")

        def on_analysis_end(self, results: Any) -> None:
            self.events.append("analysis.end")  # no super(): its bases' definitions run all the same

    analysis = Standalone(QUIET + tiny[len(TINY):], store=store_root)
    analysis.run()
    analysis.cleanup()
    assert analysis.events == ["parent.start", "child.start", "analysis.start", "parent.epoch_end",
                               "child.epoch_end", "parent.end", "child.end", "analysis.end"]
