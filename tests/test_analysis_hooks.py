"""on_analysis_start / epoch_end / end fire wherever they are written (trainer, analysis, both), in every use.

The order is documented in docs/analysis.md: the trainer's definitions first (on the trainer), then the
analysis's own (on the analysis); each definition runs once per analysis run.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import TINY

from lenscope.analysis import AnalysisBase
from lenscope.analysis.builtin.activations import ActivationStats
from lenscope.examples.grokking import GrokTrainer
from lenscope.runner import run_job

QUIET = TINY + ["training/analyze=false"]


class HookedTrainer(GrokTrainer):
    """A trainer that writes the three analysis hooks itself."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.events: list[str] = []
        super().__init__(*args, **kwargs)

    def on_analysis_start(self) -> None:
        self.events.append("trainer.start")

    def on_analysis_epoch_end(self, results: Any) -> None:
        self.events.append("trainer.epoch_end")

    def on_analysis_end(self, results: Any) -> None:
        self.events.append("trainer.end")


class HookedStats(ActivationStats):
    """activation_stats with the three hooks written on the analysis, recording into the class."""

    NAME = "hooked_stats"
    seen: list[str] = []

    def on_analysis_start(self) -> None:
        HookedStats.seen.append("analysis.start")

    def on_analysis_epoch_end(self, results: Any) -> None:
        HookedStats.seen.append("analysis.epoch_end")

    def on_analysis_end(self, results: Any) -> None:
        HookedStats.seen.append("analysis.end")


TRAINER_RUN = ["trainer.start", "trainer.epoch_end", "trainer.end"]
ANALYSIS_RUN = ["analysis.start", "analysis.epoch_end", "analysis.end"]


@pytest.fixture(autouse=True)
def _fresh_records():
    HookedStats.seen = []


def test_run_analysis_fires_the_hooks_a_trainer_writes(tiny, store_root):
    trainer = HookedTrainer(QUIET + tiny[len(TINY):], store=store_root)
    trainer.run_analysis("activation_stats")
    trainer.cleanup()
    assert trainer.events == TRAINER_RUN


def test_run_analysis_fires_hooks_written_on_both_trainer_first(tiny, store_root):
    trainer = HookedTrainer(QUIET + tiny[len(TINY):], store=store_root)
    trainer.run_analysis(HookedStats)
    trainer.cleanup()
    assert trainer.events == TRAINER_RUN and HookedStats.seen == ANALYSIS_RUN


def test_a_standalone_analysis_fires_the_trainer_s_and_its_own_hooks(tiny, store_root):
    class Standalone(AnalysisBase, HookedTrainer):
        NAME = "standalone_hooks"

        def select(self, paths: list[str]) -> str:
            return "embed"

        def analyze(self, layer: Any, inputs: Any) -> Any:
            return {"n": inputs[next(iter(inputs))].sum()}

        def on_analysis_start(self) -> None:
            self.events.append("analysis.start")

        def on_analysis_end(self, results: Any) -> None:
            self.events.append("analysis.end")

    analysis = Standalone(QUIET + tiny[len(TINY):], store=store_root)
    analysis.run()
    analysis.cleanup()
    assert analysis.events == ["trainer.start", "analysis.start", "trainer.epoch_end", "trainer.end",
                               "analysis.end"]


class TandemHooked(HookedTrainer):
    """The hooked trainer with HookedStats in tandem."""

    ANALYSIS = (HookedStats,)


def test_tandem_fires_the_trainer_s_and_the_analysis_s_hooks_at_each_validation(tiny, store_root):
    config = tiny + ["training/steps=4", "logging/validation_interval=2", "logging/checkpoint_interval=0"]
    trainer = TandemHooked(config, store=store_root)
    run_job(trainer)
    assert trainer.events == TRAINER_RUN * 2 and HookedStats.seen == ANALYSIS_RUN * 2
