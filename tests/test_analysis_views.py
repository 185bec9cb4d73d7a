"""A borrowed view (`from_trainer`) is a complete analysis: every public method works or refuses clearly."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lenscope.analysis.builtin.activations import ActivationStats
from lenscope.analysis.running import combined_class
from lenscope.errors import UsageError
from lenscope.examples.grokking import GrokTrainer

QUIET = ["training/analyze=false"]
REFUSED = "borrowed view"


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    from conftest import TINY

    root = tmp_path_factory.mktemp("views")
    trainer = GrokTrainer(TINY + QUIET + [f"logging/results={root / 'results'}"], store=root / "runs")
    trainer.setup()
    yield trainer
    trainer.cleanup()


@pytest.fixture(scope="module")
def view(trainer):
    return combined_class(ActivationStats, GrokTrainer).from_trainer(trainer)


def test_find_and_initialized_work_on_a_view(view, trainer):
    assert view.find() == trainer.find()
    init = view.initialized()
    np.testing.assert_array_equal(jax.tree_util.tree_leaves(init.params)[0],
                                  jax.tree_util.tree_leaves(trainer.initialized().params)[0])


def _batch(view: Any) -> dict[str, Any]:
    return view.batch("validation", 0)


def _debug(view: Any) -> Any:
    with view.debug("embed") as (layer, inputs):
        return type(layer).__name__, list(inputs)


def _each_hook(view: Any) -> None:
    for name in ("on_train_start", "on_train_end", "on_train_session_end", "on_test_session_end",
                 "on_analysis_session_end", "on_analysis_start"):
        getattr(view, name)()


# name -> what calling it on a view does: a callable(view) that must work, or REFUSED (a RuntimeError naming it)
CALLS: dict[str, Callable[[Any], Any] | str] = {
    "abstract_state": lambda v: v.abstract_state(),
    "activations": lambda v: v.activations(_batch(v), ["embed"]),
    "analysis_batch": lambda v: v.analysis_batch(),
    "analysis_key": lambda v: v.analysis_key(),
    "analysis_step": lambda v: pytest.raises(UsageError, list, v.analysis_step()),  # no table schema: says so
    "analyze": lambda v: v.compute(),  # pure: traced inside compute's one compiled capture
    "apply_model": lambda v: v.apply_model(v.module(v.state.params), v.model_inputs(_batch(v))),
    "batch": _batch,
    "binding_key": lambda v: len(v.binding_key()),  # a key (not None) for this linen definition
    "block_path": lambda v: v.block_path(0),
    "build_data": lambda v: v.build_data(),
    "build_model": lambda v: v.build_model(),
    "build_optimizer": lambda v: v.build_optimizer(),
    "build_schedule": lambda v: v.build_schedule(),
    "by_path": lambda v: v.by_path([None] * len(v.selected), [None] * len(v.selected)),
    "cleanup": REFUSED,
    "compiled": lambda v: v.compiled(v.analysis_batch(), v.analysis_key()),
    "compiler_options": lambda v: v.compiler_options(),
    "compute": lambda v: v.compute(),
    "conclude": lambda v: v.conclude(v.compute()),
    "corrupt": lambda v: v.corrupt(_batch(v)),
    "debug": _debug,
    "eval_step": lambda v: jax.eval_shape(v.eval_step, v.state.params, _batch(v)),  # traced, not compiled: pure
    "evaluate": lambda v: v.evaluate("validation"),
    "executable": lambda v: v.executable(v.state, v.analysis_batch(), v.analysis_key()),
    "find": lambda v: v.find(),
    "finish": REFUSED,
    "forward": lambda v: v.forward(_batch(v)),
    "gradients": lambda v: v.gradients(_batch(v), ["embed"], lambda out: jnp.sum(out)),
    "init_batch": lambda v: v.init_batch(),
    "init_params": lambda v: v.init_params(jax.random.PRNGKey(0)),
    "init_state": lambda v: v.init_state(jax.random.PRNGKey(0)),
    "initialized": lambda v: v.initialized(),
    "inputs_for_call": lambda v: v.inputs_for_call({"k": 1}).__enter__(),
    "log": lambda v: v.log("x", 1.0),
    "log_dict": lambda v: v.log_dict({"x": 1.0}),
    "loss": lambda v: jax.eval_shape(v.loss, v.state.params, _batch(v), jax.random.PRNGKey(0)),  # pure: traced
    "model_inputs": lambda v: v.model_inputs(_batch(v)),
    "module": lambda v: v.module(v.state.params),
    "on_analysis_end": lambda v: v.on_analysis_end({}),
    "on_analysis_epoch_end": lambda v: v.on_analysis_epoch_end({}),
    "on_analysis_session_end": _each_hook,
    "on_analysis_start": _each_hook,
    "on_test_batch_start": lambda v: v.on_test_batch_start(_batch(v), 0),
    "on_test_epoch_end": lambda v: v.on_test_epoch_end({}),
    "on_test_session_end": _each_hook,
    "on_train_end": _each_hook,
    "on_train_epoch_end": lambda v: v.on_train_epoch_end(0),
    "on_train_epoch_start": lambda v: v.on_train_epoch_start(0),
    "on_train_session_end": _each_hook,
    "on_train_start": _each_hook,
    "on_validation_end": lambda v: v.on_validation_end({}),
    "output_schema": lambda v: v.output_schema(),
    "params_of": lambda v: v.params_of(v.module(v.state.params)),
    "pass_batch": lambda v: v.pass_batch("validation", 0),
    "plot": lambda v: v.plot(v.compute()),
    "position_axis": lambda v: v.position_axis(3),  # the prompt's tokens as tick labels (read, never written)
    "position_rows": lambda v: v.position_rows(_batch(v), {}, -1, lambda out: out.sum()),
    "prompt_tokens": lambda v: v.prompt_tokens(),
    "publish": lambda v: v.publish(v.compute()),
    "results_dir": lambda v: v.results_dir(),
    "result_values": lambda v: v.result_values("name", {"x": 1.0}),
    "run": lambda v: v.run(),
    "run_analysis": REFUSED,
    "run_tandem": lambda v: v.run_tandem(),
    "save_checkpoint": REFUSED,
    "save_output": lambda v: v.save_output(v.plot(v.compute())),
    "select": lambda v: v.select(v.find()),
    "selection": lambda v: v.selection(v.analysis_batch(), v.analysis_key()),
    "setup": REFUSED,
    "step_key": lambda v: v.step_key(v.state),
    "surgery": lambda v: v.surgery(v.abstract_state(), jax.device_get(v.state)),
    "test": REFUSED,
    "test_step": lambda v: v.test_step(_batch(v), 0),
    "tick": REFUSED,
    "token_strings": lambda v: v.token_strings([0, v.args.p]),
    "trace": lambda v: v.trace(v.state, _batch(v), v.analysis_key()),
    "train": lambda v: pytest.raises(UsageError, v.train),  # an analysis never trains (test_analysis_refusals.py)
    "train_step": lambda v: jax.eval_shape(v.train_step, v.state, _batch(v)),  # traced, not compiled: pure
    "unembed": lambda v: v.unembed(v.state.params, jnp.zeros((1, v.args.d_model))),
    "use_cfg": lambda v: None,  # run_analysis binds views with it (tests/test_run_analysis.py)
    "validate": REFUSED,
    "warm": lambda v: v.warm(),
    "watch_validation": lambda v: v.watch_validation(lambda step, values: None),
}


def public_methods(cls: type) -> list[str]:
    """The public methods an analysis class has (its own and the trainer's)."""
    return sorted(name for name in dir(cls) if not name.startswith("_")
                  and inspect.isfunction(inspect.getattr_static(cls, name)))


def test_the_table_names_every_public_method():
    assert sorted(CALLS) == public_methods(combined_class(ActivationStats, GrokTrainer))


@pytest.mark.parametrize("name", sorted(CALLS))
def test_each_public_method_works_on_a_view_or_refuses_clearly(view, trainer, name):
    view.selection(view.analysis_batch(), view.analysis_key())
    state, node = trainer.state, trainer.node
    call = CALLS[name]
    if call == REFUSED:
        with pytest.raises(RuntimeError, match=f"{REFUSED} of GrokTrainer: it cannot"):
            getattr(view, name)()
    else:
        call(view)
    assert view.state is trainer.state is state and view.node == trainer.node == node  # the trainer's, untouched


def test_view_properties_read_the_trainer(view, trainer):
    assert view.borrowed and view.state is trainer.state and view.lineage is trainer.lineage
    assert view.node == trainer.node and view.is_writer and view.compilations >= 0
    assert view.params == dict(ActivationStats.PARAMS) and view.analysis_inputs == view.params
    assert dict(view.current_batch)  # the analysis batch, as a Mapping
    with pytest.raises(RuntimeError, match="borrowed view: the trainer alone replaces its state"):
        view.state = trainer.state.replace(step=trainer.state.step + 1)
