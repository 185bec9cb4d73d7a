"""The training step is compiled once per class and config, not once per trainer: a second trainer of the same model
and loss (another store, results folder and cadence) runs the first one's program and reaches the same parameters as
a step jitted on its own; a different learning rate is another program; a cached program keeps no trainer alive."""

from __future__ import annotations

import gc
import weakref

import jax
import numpy as np
from conftest import TINY

from lenscope.capture.jax_private import compiled_count
from lenscope.examples.grokking import GrokTrainer
from lenscope.training.shared_step import SharedStep, SharedSteps, step_key

STEPS = 3


def trained(trainer: GrokTrainer, step) -> dict:
    """The trainer's parameters after STEPS steps of `step` from its fresh state (host copies)."""
    trainer.setup()
    for index in range(STEPS):
        trainer.state, _ = step(trainer.state, trainer.batch("train", index))
    params = jax.tree.map(np.asarray, trainer.state.params)
    trainer.cleanup()
    return params


def test_a_second_trainer_of_one_config_runs_the_first_ones_program(tmp_path):
    first = GrokTrainer(TINY + [f"logging/results={tmp_path / 'a'}"], store=tmp_path / "a")
    shared = first._train_step
    trained(first, shared)
    assert compiled_count(shared) == 1
    again = GrokTrainer(TINY + [f"logging/results={tmp_path / 'b'}", "logging/validation_interval=5",
                                "training/analyze=false"], store=tmp_path / "b")
    assert again._train_step.jitted is shared.jitted  # the step never reads the cadence, folder or analyses
    params = trained(again, again._train_step)
    assert compiled_count(again._train_step) == 1  # nothing traced or compiled for the second trainer
    own = GrokTrainer(TINY, store=tmp_path / "c")
    alone = trained(own, jax.jit(own.train_step, donate_argnums=0))  # the step as the trainer's own program
    for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(alone)):
        np.testing.assert_array_equal(got, want)

    other = GrokTrainer(TINY + ["optimization/lr=1e-2"], store=tmp_path / "d")
    assert other._train_step.jitted is not shared.jitted and step_key(other) != step_key(first)
    assert step_key(GrokTrainer(TINY + ["model/d_mlp=32"], store=tmp_path / "e")) != step_key(first)

    class Own(GrokTrainer):  # a trainer whose step may read more than its config keeps a step of its own
        SHARED_STEP = False

    mine = Own(TINY, store=tmp_path / "f")
    assert not isinstance(mine._train_step, SharedStep) and compiled_count(mine._train_step) == 0


def test_a_cached_program_keeps_no_trainer_alive(tmp_path):
    steps = SharedSteps(size=2)
    trainer = GrokTrainer(TINY + ["training/seed=7"], store=tmp_path / "a")
    step = steps.step(trainer)
    trained(trainer, step)
    ref = weakref.ref(trainer)
    del trainer
    gc.collect()
    assert ref() is None and compiled_count(step) == 1  # the trainer is gone, its program stays with the key

    keys = [GrokTrainer(TINY + [f"training/seed={s}"], store=tmp_path / f"s{s}") for s in (7, 8, 9)]
    handles = [steps.step(t) for t in keys]
    assert handles[0].jitted is step.jitted  # seed 7's key was still held
    assert steps.step(keys[1]).jitted is handles[1].jitted and steps.step(keys[0]).jitted is not step.jitted  # LRU
    evicted = weakref.ref(step.jitted)
    del step, handles
    gc.collect()
    assert evicted() is None  # evicted and held by no trainer: its programs go with it
