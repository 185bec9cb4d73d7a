"""Honest lifecycles: every path ends a node done or failed, resumed nodes record the config they were
made with, and the recorded steps/s is the one the progress line shows."""

from __future__ import annotations

import re

import pytest

from lenscope.cli.main import main
from lenscope.examples.grokking import GrokTrainer
from lenscope.runner import run_job
from lenscope.store import Node, Store
from lenscope.store.leases import owner


@pytest.fixture
def finished(trained_copy, store_root) -> Node:
    """A done run of 20 steps with checkpoints at 20 (this test's copy of the worker's trained BASE run)."""
    assert trained_copy.store_root == store_root
    return trained_copy.node


@pytest.fixture
def base_sources(trained_copy) -> list[str]:
    """The config `finished` ran with, its results in this test's folder."""
    return trained_copy.sources


def _state(store_root, node) -> tuple[str, str | None]:
    with Store(store_root) as store:
        record = store.get(node)
        return record.status, record.error


def test_documented_evaluation_pattern_leaves_the_node_done(base_sources, store_root, finished):
    evaluator = GrokTrainer(base_sources, base=finished, store=store_root)
    evaluator.setup(resume=True)  # takes the lineage: running, leased
    assert _state(store_root, finished) == ("running", None)
    with Store(store_root) as store:
        assert owner(store, finished.lineage) is not None
    evaluator.test("validation")
    evaluator.cleanup()
    assert _state(store_root, finished) == ("done", None)  # such a node used to be left running
    with Store(store_root) as store:
        assert owner(store, finished.lineage) is None and "validation/loss" in store.values(finished)


def test_attach_evaluates_without_touching_status_or_lease(base_sources, store_root, finished):
    evaluator = GrokTrainer(base_sources, base=finished, store=store_root)
    evaluator.setup(attach=True)
    with Store(store_root) as store:
        assert store.status(finished) == "done" and owner(store, finished.lineage) is None
    evaluator.test("validation")
    evaluator.cleanup()
    assert _state(store_root, finished) == ("done", None)


def test_evaluating_a_failed_node_keeps_its_failure(base_sources, store_root, finished):
    with Store(store_root) as store:
        store.set_status(finished, "failed", error="interrupted")
    evaluator = GrokTrainer(base_sources, base=finished, store=store_root)
    evaluator.setup(resume=True)
    evaluator.test("validation")
    evaluator.cleanup()
    assert _state(store_root, finished) == ("failed", "interrupted")


def test_manual_lifecycle_ends_done_and_a_raising_one_failed(tiny, store_root):
    trainer = GrokTrainer(tiny + ["training/steps=10"], store=store_root)
    trainer.setup()
    trainer.run()
    trainer.cleanup()
    assert _state(store_root, trainer.node) == ("done", None)

    class Exploding(GrokTrainer):
        def on_train_end(self):
            raise RuntimeError("boom")

    failing = Exploding(tiny + ["training/steps=10"], store=store_root)
    with pytest.raises(RuntimeError, match="boom"):
        try:
            failing.setup()
            failing.run()
        finally:
            failing.cleanup()  # sees the exception on its way out
    assert _state(store_root, failing.node) == ("failed", "RuntimeError('boom')")
    failing.cleanup()  # idempotent: nothing changes
    assert _state(store_root, failing.node) == ("failed", "RuntimeError('boom')")


def test_resume_with_overrides_records_the_config_it_ran_with(base_sources, store_root, finished):
    first = run_job(GrokTrainer, base_sources + ["training/steps=30", "optimization/lr=1e-3"], base=finished,
                    store=store_root)
    without_lr = [source for source in base_sources if not source.startswith("optimization/lr")]
    second = GrokTrainer(without_lr + ["training/steps=40"], base=first, store=store_root)
    assert second.args.lr == 1e-3  # the first resume's override, read from the node it produced
    run_job(second)
    with Store(store_root) as store:
        config = {n.seq: store.config(n) for n in store.query().nonce(finished.nonce).all()}
    assert {config[s]["optimization"]["lr"] for s in range(21)} == {3e-3}  # made by the first run
    assert {config[s]["optimization"]["lr"] for s in range(21, 41)} == {1e-3}
    assert {config[s]["training"]["steps"] for s in range(21, 31)} == {30}
    assert {config[s]["training"]["steps"] for s in range(31, 41)} == {40}


def test_recorded_steps_per_s_is_the_one_the_progress_line_shows(tiny, store_root, capsys):
    node = run_job(GrokTrainer, tiny + ["training/analyze=false"], store=store_root)  # validations at 20 and 40
    lines = re.findall(r"/40 loss=\S+ (\S+) step/s", capsys.readouterr().err)
    with Store(store_root) as store:
        recorded = [store.values(Node(node.name, node.nonce, s))["train/steps_per_s"] for s in (10, 20, 30, 40)]
    assert lines == [f"{rate:.1f}" for rate in recorded]


def test_resume_says_why_when_there_is_nothing_to_resume(trained_base_template, store_root, finished, capsys):
    ran_with = trained_base_template.sources  # the config `finished` ran with, its results folder included

    def resume(*sources: str) -> str:  # refused before anything is written
        assert main(["run", "grokking/train", *ran_with, *sources, "--resume", "--store", str(store_root)]) == 2
        return capsys.readouterr().err.strip()

    assert resume("training/steps=20") == (
        "lenscope: error: nothing to resume: no interrupted, failed or stale run of grokking/train; the latest run, "
        f"{finished}, finished: continue it with --base {finished}")
    with Store(store_root) as store:
        store.set_status(finished, "failed", error="interrupted")
    assert resume("training/steps=20", "optimization/lr=1e-3") == (
        "lenscope: error: no interrupted, failed or stale run of grokking/train has this config; the latest, "
        f"{finished} (failed: interrupted), differs in optimization/lr (0.003 there, 0.001 here): give --resume the "
        f"config it ran with, or resume it as it was: lenscope run grokking/train --base {finished}")
    assert main(["run", "grokking/train", "--resume", "--base", str(finished), "--store", str(store_root)]) == 2
    assert capsys.readouterr().err.strip() == (
        "lenscope: error: --resume finds the node to resume itself; with grokking/train, --base names the state to go "
        f"on from, so the two cannot be combined (to resume {finished} itself: --base {finished} without --resume)")
