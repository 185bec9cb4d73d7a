"""The training, validation and test loops of BaseTrainer (T3), as a mixin over its state and lineage."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import optax

from ..capture.per_example import per_example
from ..errors import UsageError
from .hook_calls import wrap_hooks
from .interrupts import check as check_interrupt
from .interrupts import shielded
from .kinds import evaluating, stepping
from .metrics import MetricLog, table
from .phase import Phase, session
from .placement import to_host
from .progress import Progress, announced
from .shared_step import STEPS
from .state import TrainState

NOTHING = contextlib.nullcontext()  # a step after the first: nothing to announce


def due(step: int, interval: int, *, last: bool = False) -> bool:
    """Whether a cadence of `interval` steps fires at `step` (also at the `last` step); an interval of 0 never fires."""
    return interval > 0 and (step % interval == 0 or last)


class StopTraining(Exception):  # noqa: N818 (a signal, like StopIteration, not an error)
    """Raised by a validation watcher to end training at this step as a finished run (e.g. a pruned sweep trial)."""


ValidationWatcher = Callable[[int, Mapping[str, float]], None]
"""Called with (step, validation values) after each validation; may raise StopTraining."""
def reports(step: int, args: Any) -> bool:
    """Whether training values are recorded at `step`: every report interval, at the end, and at each checkpoint.

    A checkpoint closes the report window, so a run resumed from it averages the same steps as the run
    that was not interrupted: its reported means are the same.
    """
    return due(step, args.report_interval, last=step == args.steps) or (
        args.report_interval > 0 and due(step, args.checkpoint_interval))


class TrainingLoop:
    """run()/train(), validate(), test(), log()/log_dict() and the hooks; expects BaseTrainer's attributes."""

    PER_EXAMPLE: ClassVar[bool] = False  # the model takes one example; lenscope's forwards map it (apply_model)
    # True where train_step is a function of the config and --base alone: trainers of this class with equal ones
    # share one compiled step (shared_step); a trainer whose step reads other state of its own keeps it False.
    SHARED_STEP: ClassVar[bool] = False
    phase: Phase | None = None  # Phase.TRAIN / TEST / ANALYSIS while one runs (hooks read it); None between

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """The analysis hooks a class defines run once per firing, whether or not they call super()."""
        super().__init_subclass__(**kwargs)
        wrap_hooks(cls)

    def _init_loop(self) -> None:
        self._metric_log = MetricLog()
        self._step_fn: Any = None
        self._eval_step = jax.jit(evaluating(self.eval_step))  # (params, model_state, batch)
        self._accumulate = jax.jit(lambda total, new: jax.tree_util.tree_map(jnp.add, total, new))
        self._whole_split_batches: dict[str, dict[str, jax.Array]] = {}
        self._watchers: list[ValidationWatcher] = []
        self.stopped: str | None = None  # why a watcher ended training early (StopTraining's message), else None

    def watch_validation(self, watcher: ValidationWatcher) -> None:
        """Call `watcher(step, values)` after each validation; a watcher raising StopTraining ends training there."""
        self._watchers.append(watcher)

    # -- hooks ---------------------------------------------------------------------
    def on_train_start(self) -> None:
        """Called once before the first training step."""

    def on_train_end(self) -> None:
        """Called once after the last training step."""

    def on_train_epoch_start(self, epoch: int) -> None:
        """Called before the first step of each pass over the training split (and of a resumed run's first pass)."""

    def on_train_epoch_end(self, epoch: int) -> None:
        """Called after the step that completes a pass over the training split (epoch counts from 0)."""

    def on_test_batch_start(self, batch: Mapping[str, jax.Array], batch_idx: int) -> None:
        """Called before each test batch is evaluated."""

    def on_train_session_end(self) -> None:
        """Called when train()/run() ends, also after an error."""

    def on_test_session_end(self) -> None:
        """Called when test() ends, also after an error."""

    def on_analysis_start(self) -> None:
        """Called before each analysis run; on the trainer, the analysis or both, each definition runs once, with or
        without super() (analysis/hooks.py)."""

    def on_analysis_epoch_end(self, results: Any) -> None:
        """Called after each pass over the analysis data with its results."""

    def on_analysis_end(self, results: Any) -> None:
        """Called after each analysis run with the gathered results (a tandem view's on the publisher's thread)."""

    def on_analysis_session_end(self) -> None:
        """Called when run_analysis() ends, also after an error."""

    def on_validation_end(self, metrics: Mapping[str, float]) -> None:
        """Called after each validation pass with its metrics."""

    def on_test_epoch_end(self, metrics: Mapping[str, float]) -> None:
        """Called after the test pass with the accumulated metrics."""

    # -- pure functions --------------------------------------------------------------
    @property
    def _train_step(self) -> Any:
        """train_step jitted with the state donated (with SHARED_STEP, one program for every trainer of this class,
        config and base: `shared_step`); on a mesh, with explicit state and batch shardings in and out."""
        if self._step_fn is None:
            if self.placement.single and self.SHARED_STEP:
                self._step_fn = STEPS.step(self)
            elif self.placement.single:
                self._step_fn = jax.jit(self.train_step, donate_argnums=0)
            else:
                state = self.placement.state_shardings(self.state)
                batch = jax.tree_util.tree_map(lambda leaf: leaf.sharding, self.batch("train", 0))
                self._step_fn = jax.jit(self.train_step, in_shardings=(state, batch),
                                        out_shardings=(state, self.placement.replicated()), donate_argnums=0)
        return self._step_fn

    def loss(self, params: Any, batch: Mapping[str, jax.Array], key: jax.Array) -> tuple[jax.Array, dict]:
        """Scalar loss and auxiliary metrics of one batch; override for the task."""
        raise NotImplementedError(f"{type(self).__name__} must define loss()")

    def step_key(self, state: TrainState) -> jax.Array:
        """The PRNG key of the state's current step (a pure function of seed and step)."""
        return jax.random.fold_in(state.key, state.step)

    def train_step(self, state: TrainState, batch: Mapping[str, jax.Array]) -> tuple[TrainState, dict]:
        """One optimizer step; pure, jitted with the state donated."""
        grad_fn = jax.value_and_grad(stepping(self.model_kind, self.loss, state.model_state), has_aux=True)
        (loss, (aux, model_state)), grads = grad_fn(state.params, batch, self.step_key(state))
        updates, opt_state = self.optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {**aux, "loss": loss, "grad_norm": optax.tree.norm(grads), "lr": self.schedule(state.step)}
        return state.replace(step=state.step + 1, params=params, opt_state=opt_state, model_state=model_state), metrics

    def eval_step(self, params: Any, batch: Mapping[str, jax.Array]) -> dict:
        """Loss and auxiliary metrics of one batch without gradients."""
        loss, aux = self.loss(params, batch, jax.random.PRNGKey(0))
        return {**aux, "loss": loss}

    # -- batches -------------------------------------------------------------------
    def batch(self, split: str, index: int = 0) -> dict[str, jax.Array]:
        """Batch `index` of `split`, prepared and placed outside any trace, deterministic per node (T5).

        A split taken whole (full-batch training) is the same every step, so it is placed once and reused.
        """
        if self.data.global_batch_size(split) < self.data.size(split):
            return self.placement.place_batch(self.data.host_batch(split, index))
        if split not in self._whole_split_batches:
            self._whole_split_batches[split] = self.placement.place_batch(self.data.host_batch(split, 0))
        return self._whole_split_batches[split]

    def pass_batch(self, split: str, index: int) -> tuple[dict[str, jax.Array], int]:
        """Batch `index` of one pass over `split` that sees every example once, and how many of its rows are real.

        Full batches are `batch(split, index)`; a short last batch is padded to full size (same shape,
        same compiled function), and only its first rows are examples of the split.
        """
        real = self.data.pass_examples(split, index)
        if real == self.data.global_batch_size(split):
            return self.batch(split, index), real
        return self.placement.place_batch(self.data.host_slice(split, self.data.pass_indices(split, index))), real

    def apply_model(self, model: Any, inputs: tuple) -> Any:
        """The model on a batch's inputs: `model(*inputs)`, or mapped over the batch when PER_EXAMPLE is set.

        A model written per example (the idiomatic Equinox style, `jax.vmap(model)(x)` in the loss) sets
        `PER_EXAMPLE = True`: analyses, ops and interventions then run it through `capture.per_example`,
        and see captured inputs, recorded activations and patched values as whole batches.
        """
        return per_example(model)(*inputs) if self.PER_EXAMPLE else model(*inputs)

    def trace(self, state: TrainState, batch: Mapping[str, jax.Array], key: jax.Array) -> Any:
        """The pure forward pass analyses capture from: the model applied to the batch inputs."""
        return self.apply_model(self.module(state.params, state.model_state), self.model_inputs(batch))

    # -- loops ---------------------------------------------------------------------
    def train(self) -> None:
        """The train entry point: run() (the job entry point) in the train phase."""
        return self.run()

    def run(self) -> None:
        """Train to `training/steps` in the train phase: step, report, validate, checkpoint, tick."""
        with session(self, Phase.TRAIN):
            self._train_steps()

    def _train_steps(self) -> None:
        """The training loop proper; epoch hooks fire at each pass over the training split."""
        self.setup(resume=False)  # not set up yet: a new lineage, branched from `base` if there is one
        if not self.lineage.owner:
            raise UsageError(f"{type(self).__name__} was set up attached to {self.lineage.node} (to inspect or "
                             "analyze it), so it cannot train: call setup(resume=True) to continue that lineage or "
                             "setup(resume=False) to branch from it, on a new trainer")
        per_epoch = self.data.num_batches("train")
        self._tandem.warm()
        args, start = self.args, int(self.state.step)
        progress = Progress(args.steps, initial=start, desc=self.name)
        self.on_train_start()
        totals, count, t0 = None, 0, time.perf_counter()
        try:
            for step in range(start + 1, args.steps + 1):
                check_interrupt()  # a signal swallowed where it landed (a GC callback) still stops the run
                if step == start + 1 or (step - 1) % per_epoch == 0:
                    self.on_train_epoch_start((step - 1) // per_epoch)
                with announced(f"{self.name}: compiling the training step") if step == start + 1 else NOTHING:
                    self.state, metrics = self._train_step(self.state, self.batch("train", step - 1))
                self.tick()
                totals = metrics if totals is None else self._accumulate(totals, metrics)
                count += 1
                progress.update()
                if reports(step, args):
                    values = {f"train/{k}": float(v) / count for k, v in to_host(totals).items()}
                    values["train/steps_per_s"] = count / (time.perf_counter() - t0)
                    values["train/step"] = step
                    self.lineage.record(values)
                    progress.show({"loss": values["train/loss"]}, rate=values["train/steps_per_s"])
                    totals, count, t0 = None, 0, time.perf_counter()
                if due(step, args.validation_interval):
                    with announced(f"{self.name}: validating at step {step}"):
                        values = self.validate()
                    shown = {"val_loss": values["val/loss"]}
                    if "val/accuracy" in values:  # not every job measures an accuracy (LMs do, dictionaries not)
                        shown["val_acc"] = values["val/accuracy"]
                    progress.show(shown)
                if due(step, args.checkpoint_interval, last=step == args.steps):
                    self.save_checkpoint()
                if step % per_epoch == 0:
                    self.on_train_epoch_end(step // per_epoch - 1)
        except StopTraining as stop:
            self.stopped = str(stop) or "stopped"
        except KeyboardInterrupt:
            self._tandem.stop()  # finish or abandon the files being saved; start no more
            raise
        finally:
            progress.close()
            self._tandem.wait()  # the last validation's figures are saved before the node is marked done
            self._tandem.report()
        self.on_train_end()

    def evaluate(self, split: str) -> dict[str, float]:
        """Mean metrics over the configured number of batches of `split`."""
        batches = self.data.num_batches(split)
        if self.args.eval_batches > 0:
            batches = min(batches, self.args.eval_batches)
        metrics = MetricLog()
        for index in range(batches):
            batch = self.batch(split, index)
            metrics.add_all(to_host(self._eval_step(self.state.params, self.state.model_state, batch)))
        return metrics.means()

    def validate(self) -> dict[str, float]:
        """Validation values recorded on the current node, then tandem analyses when `analysis_interval` is due."""
        values = {f"val/{k}": v for k, v in self.evaluate("validation").items()}
        self.lineage.record(values)
        self.on_validation_end(values)
        if due(int(self.state.step), self.args.analysis_interval or 1):
            self.run_tandem()
        for watcher in self._watchers:
            watcher(int(self.state.step), values)
        return values

    def save_checkpoint(self) -> None:
        """Write the state asynchronously to the current node's checkpoint folder."""
        self._checkpoints.wait()  # the previous save commits first (interruptible: nothing is half-handed over)
        with shielded():  # an interrupt waits until Orbax has the state and its commit is under way
            node = self.lineage.flush()
            step = int(self.state.step)
            self._checkpoints.save(self.lineage.checkpoint_dir(), self.state, step,
                                   lambda path, s: self.lineage.mark_checkpoint(node, path, s))

    def test(self, split: str = "test") -> dict[str, float]:
        """Evaluate `split` through `test_step` in the test phase, print the accumulated metrics and record them."""
        with session(self, Phase.TEST):
            return self._test_split(split)

    def _test_split(self, split: str) -> dict[str, float]:
        """The test loop proper; on_test_batch_start fires before each batch."""
        self.setup()
        self._metric_log.reset()
        batches = self.data.num_batches(split)
        if self.args.eval_batches > 0:
            batches = min(batches, self.args.eval_batches)
        for index in range(batches):
            batch = self.batch(split, index)
            self.on_test_batch_start(batch, index)
            self.test_step(batch, index)
        means = self._metric_log.means()
        if self.is_writer:
            print(table(f"{split} ({self.node})", means), flush=True)
        self.lineage.record({f"{split}/{k}": v for k, v in means.items()})
        self.on_test_epoch_end(means)
        return means

    def test_step(self, batch: Mapping[str, jax.Array], index: int) -> None:
        """Default test step: log the eval metrics of the batch."""
        self.log_dict(to_host(self._eval_step(self.state.params, self.state.model_state, batch)))

    def log(self, name: str, value: Any) -> None:
        """Accumulate a metric for the current epoch (mean over calls)."""
        self._metric_log.add(name, value)

    def log_dict(self, values: Mapping[str, Any]) -> None:
        """Accumulate several metrics for the current epoch."""
        self._metric_log.add_all(values)
