"""A linen model's init is one program per definition, compiled with the QUICK options (it runs once, so its compile
time is its cost: bench/quick_init.py), and its parameters are flax's own `model.init` up to rounding."""

from __future__ import annotations

import jax
import numpy as np
from conftest import TINY

from lenscope.capture.jax_private import compiled_count
from lenscope.compile_options import QUICK
from lenscope.examples.grokking import GrokTrainer
from lenscope.training.kinds.linen import _compiled_init


def test_equal_definitions_share_one_init_program_whose_params_are_flax_s(tmp_path):
    first = GrokTrainer(TINY + ["model/d_mlp=48"], store=tmp_path / "a")
    key = jax.random.key(3)
    params = first.init_params(key)
    program = _compiled_init(first.model)
    assert compiled_count(program) == 1
    assert dict(program._jit_info.compiler_options_kvs) == dict(QUICK)  # jax.jit's record of its options (0.10)
    eager = first.model.init(key, *first.model_inputs(first.init_batch()))["params"]  # flax, op by op
    assert jax.tree.structure(params) == jax.tree.structure(eager)
    for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(eager)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-6)
    again = GrokTrainer(TINY + ["model/d_mlp=48", "optimization/lr=1e-2"], store=tmp_path / "b")
    other = again.init_params(jax.random.key(4))
    assert _compiled_init(again.model) is program and compiled_count(program) == 1  # no second compile
    assert not np.array_equal(np.asarray(jax.tree.leaves(other)[0]), np.asarray(jax.tree.leaves(params)[0]))
