"""Inits are compiled programs (training/init_program.py): a linen model's, one per definition and input shapes,
and a dictionary trainer's, one per spec. Each compiles with the QUICK options when it makes few parameters (it runs
once, so its compile time is its cost: bench/quick_init.py) and with XLA's optimizations when it makes many; the
parameters are what the same init computes op by op, up to rounding."""

from __future__ import annotations

import jax
import numpy as np
from conftest import TINY

from lenscope.compile_options import QUICK
from lenscope.dictionaries import Spec, init_params
from lenscope.dictionaries.trainer import _init_program
from lenscope.examples.grokking import GrokTrainer
from lenscope.training.init_program import InitProgram
from lenscope.training.kinds.linen import _compiled_init


def test_equal_definitions_share_one_init_program_whose_params_are_flax_s(tmp_path):
    first = GrokTrainer(TINY + ["model/d_mlp=48"], store=tmp_path / "a")
    key = jax.random.key(3)
    params = first.init_params(key)
    program = _compiled_init(first.model)
    assert list(program.options.values()) == [dict(QUICK)]  # one program, compiled quickly: 10K parameters
    eager = first.model.init(key, *first.model_inputs(first.init_batch()))["params"]  # flax, op by op
    assert jax.tree.structure(params) == jax.tree.structure(eager)
    for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(eager)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-6)
    again = GrokTrainer(TINY + ["model/d_mlp=48", "optimization/lr=1e-2"], store=tmp_path / "b")
    other = again.init_params(jax.random.key(4))
    assert _compiled_init(again.model) is program and len(program.options) == 1  # no second compile
    assert not np.array_equal(np.asarray(jax.tree.leaves(other)[0]), np.asarray(jax.tree.leaves(params)[0]))


def test_an_init_of_many_parameters_keeps_xla_s_optimizations(tmp_path):
    trainer = GrokTrainer(TINY, store=tmp_path / "a")
    inputs = trainer.model_inputs(trainer.init_batch())
    def init(key, *args):
        return trainer.model.init(key, *args)["params"]

    few, many = InitProgram(init), InitProgram(init, quick_below=1)  # 1: every model is large
    for got, want in zip(jax.tree.leaves(many(jax.random.key(5), *inputs)), jax.tree.leaves(few(jax.random.key(5),
                                                                                                   *inputs))):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-6)
    assert list(many.options.values()) == [None] and list(few.options.values()) == [dict(QUICK)]


def test_a_dictionary_trainer_s_init_is_one_program_per_spec_equal_to_the_eager_init():
    spec = Spec("topk", d_in=16, d_sae=64, d_out=16, k=4, transcoder=True)
    program = _init_program(spec, 0.1, 0.0, 3)
    key = jax.random.key(7)
    params = program(key)
    eager = jax.vmap(lambda k: init_params(k, spec, decoder_init_norm=0.1))(jax.random.split(key, 3))
    assert sorted(params) == sorted(eager) and params["W_dec"].shape == (3, 64, 16)
    for name in params:
        np.testing.assert_allclose(np.asarray(params[name]), np.asarray(eager[name]), rtol=0, atol=1e-6)
    assert _init_program(Spec("topk", d_in=16, d_sae=64, d_out=16, k=4, transcoder=True), 0.1, 0.0, 3) is program
    assert list(program.options.values()) == [dict(QUICK)]
    shapes = jax.eval_shape(program, key)  # inside a trace it is traced, not run
    assert shapes["W_enc"].shape == (3, 16, 64) and len(program.options) == 1
