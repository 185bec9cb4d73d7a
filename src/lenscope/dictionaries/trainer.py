"""SaeTrainer: a BaseTrainer whose model is a stack of dictionaries and whose data are a model node's activations.

Its node's parent is the model node it explains (`lenscope run grokking/sae --base MODEL_NODE`), so the
store answers which dictionaries explain a checkpoint; given one of its own nodes as base it resumes or
branches like any job. Several sites train one dictionary each in one program (vmapped over a leading
layer axis). The step is SAELens' (Adam, gradient clip, warm-up and decay, coefficient warm-up, dead-latent
window); validation records SAELens' metrics as node values (docs/dictionaries.md).
"""

from __future__ import annotations

import dataclasses
import os
from functools import cached_property, lru_cache, partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..config import hydrate, to_dict
from ..errors import UsageError
from ..job_registry import jobs, resolve
from ..store import Node, Store
from ..training import BaseTrainer
from ..training.data import ArrayData
from ..training.init_program import InitProgram
from ..training.lineage import Lineage, Mode, open_lineage
from ..training.placement import Placement
from ..training.progress import announced
from ..training.state import TrainState
from ..training.trainer import node_name, open_store
from .activations import Activations, cached_activations, norm_scale
from .config import SaeConfig
from .core import BATCH_TOPK, Dictionary, Spec, init_params
from .losses import LossConfig, loss
from .sites import check_sites
from .stack import DICTIONARY_RULES, DictionaryStack, unscale


def _layers_init(key: jax.Array, spec: Spec, decoder_init_norm: float | None, init_threshold: float,
                 layers: int) -> dict[str, jax.Array]:
    init = partial(init_params, spec=spec, decoder_init_norm=decoder_init_norm, init_threshold=init_threshold)
    return jax.vmap(init)(jax.random.split(key, layers))


@lru_cache(maxsize=16)
def _init_program(spec: Spec, decoder_init_norm: float | None, init_threshold: float, layers: int) -> InitProgram:
    """The init of `layers` dictionaries of `spec`: one program, shared by the trainers of one spec in a process."""
    return InitProgram(partial(_layers_init, spec=spec, decoder_init_norm=decoder_init_norm,
                               init_threshold=init_threshold, layers=layers))


class SaeTrainer(BaseTrainer[SaeConfig, DictionaryStack]):
    """Train sparse dictionaries on the activations of a model node (F1)."""

    CONFIG = SaeConfig
    SHARED_STEP = True  # the step reads only the config, --base and the data its config names

    def __init__(self, config: Any = None, *, base: Node | str | None = None,
                 store: Store | str | os.PathLike | None = None) -> None:
        """As BaseTrainer; a `base` that is not a dictionary's node (no `sae/source`) is the model to explain."""
        if base is not None:
            if not isinstance(store, Store):
                url = self._peek_store_url(config)
                store = open_store(store, url)
            node = store.get(base).node
            if self.base_as_config(store, node) is not None:  # a model's node: the one to explain
                source = {"sae": {"source": str(node)}}
                config = (dataclasses.replace(config, source=str(node)) if isinstance(config, self.CONFIG)
                          else [*self._sources(config), source])
                base = None
        self._model_trainer: Any = None
        self._unsaved: list[Any] = []  # the activations captured here, stored on the model's node at the end
        super().__init__(config, base=base, store=store)
        if self.args.mesh_rules is None:  # latents over `model`, tokens over `data` (the batch's leading dim)
            self.placement = Placement(self.placement.mesh, DICTIONARY_RULES)

    @classmethod
    def base_as_config(cls, store: Store, base: Node | str) -> list[str] | None:
        """A model's node as base is the model to explain (`sae/source`); one of our own nodes is a state to go on."""
        node = store.get(base).node
        saved = store.config(node) or {}
        if isinstance(saved.get("sae"), dict) and saved["sae"].get("source"):
            return None
        return [f"sae/source={node}"]

    def _peek_store_url(self, config: Any) -> str | None:
        """The store/url the config names (the store must be open to tell a model node from one of ours)."""
        if isinstance(config, self.CONFIG):
            return config.store_url
        return hydrate(self.CONFIG, *self._sources(config)).store_url

    # -- the model explained and its activations -------------------------------------
    @property
    def source(self) -> Node:
        """The model node this dictionary explains."""
        if not self.args.source:
            raise UsageError(f"{self.name} trains on a model's activations: give the model's node, "
                             f"`lenscope run {self.name.replace('.', '/')} --base MODEL_NODE` (or sae/source=NODE)")
        return self.store.get(self.args.source).node

    def model_trainer(self) -> Any:
        """The explained model's trainer, restored at the source node (attached: it writes nothing there)."""
        if self._model_trainer is None:
            self._model_trainer = self.model_at(self.source)
        return self._model_trainer

    def model_at(self, node: Node) -> Any:
        """A trainer of the explained model's job restored at `node`, attached (the caller cleans it up)."""
        job = self.args.model_job or next((name for name, cls in jobs().items() if node_name(cls) == node.name), None)
        if job is None:
            raise UsageError(f"no registered job makes nodes named {node.name!r}; set sae/model_job to the "
                             f"model's job (a registered name, package.module:Class or file.py:Class)")
        trainer = resolve(job)(None, base=node, store=self.store)
        try:
            trainer.setup(attach=True)
        except BaseException:
            trainer.cleanup()
            raise
        return trainer

    @property
    def inputs(self) -> list[str]:
        """The activation column each stacked dictionary reads: the sites."""
        return list(self.args.sites)

    @property
    def outputs(self) -> list[str]:
        """The column each stacked dictionary reconstructs or predicts: the targets, else the sites."""
        return list(self.args.targets or self.args.sites)

    def _capture(self, split: str, model: Any = None) -> Activations:
        """The activations at the sites and targets over `split` of `model` (the source's trainer by default)."""
        sites = list(self.args.sites) + list(self.args.targets or [])
        model = model if model is not None else self.model_trainer()
        return cached_activations(model, sites, split, positions=self.args.positions, pending=self._unsaved)

    @cached_property
    def activations(self) -> dict[str, Activations]:
        """The train and validation activations (captured once, cached on the model's node)."""
        with announced(f"{self.name}: capturing activations of {self.source}"):
            check_sites(self.model_trainer(), self.args.sites, self.args.targets)
            splits = self.model_trainer().data.splits
            return {"train": self._capture(self.args.split),
                    "validation": self._capture("validation" if "validation" in splits else self.args.split)}

    def _stacked(self, acts: Activations, names: list[str]) -> np.ndarray:
        dims = {acts.sites[n].shape[-1] for n in names}
        if len(dims) > 1:
            raise UsageError(f"sites {', '.join(names)} differ in width {sorted(dims)}; dictionaries trained "
                             "together (vmapped) need sites of one width: train them in separate jobs")
        return np.stack([acts.sites[n] for n in names], axis=1)  # [tokens, layers, d]

    @cached_property
    def scales(self) -> tuple[np.ndarray, np.ndarray]:
        """Per layer the input and target scale factors (1 without normalization)."""
        acts = self.activations["train"]
        if self.args.normalize == "none":
            ones = np.ones(len(self.inputs), np.float32)
            return ones, ones
        return (np.asarray([norm_scale(acts.sites[s]) for s in self.inputs], np.float32),
                np.asarray([norm_scale(acts.sites[s]) for s in self.outputs], np.float32))

    @cached_property
    def spec(self) -> Spec:
        """The Spec shared by every layer's dictionary."""
        a, acts = self.args, self.activations["train"]
        if a.targets is not None and len(a.targets) != len(a.sites):
            raise UsageError(f"sae/targets has {len(a.targets)} sites for {len(a.sites)} sae/sites; give one each")
        d_in = self._stacked(acts, self.inputs).shape[-1]
        d_out = self._stacked(acts, list(a.targets)).shape[-1] if a.targets else 0
        return self.spec_of(d_in, self.width_of(d_in), d_out=d_out)

    def width_of(self, d: int) -> int:
        """Latents of a dictionary over activations of width d: sae/d_sae, else sae/expansion * d."""
        return self.args.d_sae or self.args.expansion * d

    def spec_of(self, d_in: int, d_sae: int, *, d_out: int = 0, blocks: int = 1) -> Spec:
        """The Spec the config asks for, at these sizes."""
        a = self.args
        return Spec(a.architecture, d_in, d_sae, d_out=d_out, k=a.k, transcoder=a.targets is not None, skip=a.skip,
                    rescale_acts_by_decoder_norm=a.rescale and a.architecture in ("topk", *BATCH_TOPK),
                    matryoshka_widths=tuple(a.matryoshka_widths or ()), blocks=blocks)

    @property
    def loss_config(self) -> LossConfig:
        """The loss coefficients from the config."""
        a = self.args
        return LossConfig(l1_coefficient=a.l1_coefficient, l0_coefficient=a.l0_coefficient, bandwidth=a.bandwidth,
                          aux_coefficient=a.aux_coefficient, detach_gated_decoder=a.detach_gated_decoder)

    # -- BaseTrainer's construction hooks ----------------------------------------------
    def build_model(self) -> DictionaryStack:
        """One dictionary per site, stacked."""
        return DictionaryStack(self.spec, len(self.inputs))

    def build_schedule(self) -> optax.Schedule:
        """SAELens' schedule: linear warm-up from lr / warmup_steps, constant, linear decay to 0 over decay_steps."""
        a = self.args
        parts, bounds = [], []
        if a.warmup_steps > 0:
            parts.append(optax.linear_schedule(a.lr / a.warmup_steps, a.lr, a.warmup_steps - 1))
            bounds.append(a.warmup_steps)
        parts.append(optax.constant_schedule(a.lr))
        if a.decay_steps > 0:
            parts.append(optax.linear_schedule(a.lr, 0.0, a.decay_steps))
            bounds.append(max(a.steps - a.decay_steps, a.warmup_steps))
        return optax.join_schedules(parts, bounds) if bounds else parts[0]

    def build_optimizer(self) -> optax.GradientTransformation:
        """Adam (SAELens' betas from optimization/b1, b2) after a global-norm gradient clip."""
        a = self.args
        adam = optax.adam(self.schedule, b1=a.b1, b2=a.b2)
        return optax.chain(optax.clip_by_global_norm(a.grad_clip), adam) if a.grad_clip > 0 else adam

    def build_data(self) -> ArrayData:
        """Scaled activations as array splits; the train split is reshuffled each epoch from the seed."""
        in_scale, out_scale = self.scales
        splits = {}
        for split, acts in self.activations.items():
            arrays = {"inputs": self._stacked(acts, self.inputs) * in_scale[:, None]}
            if self.args.targets:
                arrays["targets"] = self._stacked(acts, list(self.args.targets)) * out_scale[:, None]
            splits[split] = arrays
        return ArrayData(splits, self.args.batch_size, self.args.seed)

    def init_params(self, key: jax.Array) -> dict[str, jax.Array]:
        """SAELens' initialization, one independent draw per layer, as one compiled program (InitProgram)."""
        a = self.args
        return _init_program(self.spec, a.decoder_init_norm,
                             a.init_threshold if a.architecture == "jumprelu" else 0.0, len(self.inputs))(key)

    def init_state(self, key: jax.Array) -> TrainState:
        """Parameters, Adam state and the steps since each latent last fired (the dead-latent window)."""
        init_key, state_key = jax.random.split(key)
        params = self.init_params(init_key)
        since = jnp.zeros((len(self.inputs), self.spec.d_sae), jnp.int32)
        return TrainState.create(params, self.optimizer.init(params), state_key, model_state={"since_fired": since})

    def _make_lineage(self, mode: Mode) -> Lineage:
        """A new dictionary's node is a child of the model node it explains (when activations come from one)."""
        if mode is Mode.NEW and self.base is None and self.args.source:
            return open_lineage(self.store, mode, self.source, name=self.name, config=to_dict(self.args),
                                writer=self.is_writer)
        return super()._make_lineage(mode)

    # -- the step ----------------------------------------------------------------------
    def dictionary(self, params: Any) -> Dictionary:
        """The stacked Dictionary of a parameter tree (training space: scaled activations)."""
        return Dictionary.of(self.spec, params)

    def train_step(self, state: TrainState, batch: Any) -> tuple[TrainState, dict]:
        """One SAELens step for every layer at once: loss, clipped Adam, dead-latent counters, BatchTopK threshold."""
        a = self.args
        x = batch["inputs"]
        y = batch.get("targets", x)
        coefficient = jnp.minimum(state.step / a.coefficient_warmup, 1.0) if a.coefficient_warmup else 1.0
        dead = state.model_state["since_fired"] > a.dead_window

        def gradients(with_dead: bool, params: Any) -> tuple[tuple[jax.Array, dict], Any]:
            mask, axis = (dead, 0) if with_dead else (None, None)
            per_layer = jax.vmap(partial(loss, cfg=self.loss_config), in_axes=(0, 1, 1, None, axis))

            def objective(params: Any) -> tuple[jax.Array, dict]:
                totals, terms = per_layer(self.dictionary(params), x, y, jnp.float32(coefficient), mask)
                return totals.sum(), terms

            return jax.value_and_grad(objective, has_aux=True)(params)

        if a.architecture in ("topk", *BATCH_TOPK):  # AuxK only while some latent is dead, as SAELens skips it
            (total, terms), grads = jax.lax.cond(jnp.any(dead), partial(gradients, True), partial(gradients, False),
                                                 state.params)
        else:
            (total, terms), grads = gradients(False, state.params)
        if a.architecture in BATCH_TOPK:  # its threshold follows an average, not the gradient
            grads = {**grads, "threshold": jnp.zeros_like(grads["threshold"])}
        updates, opt_state = self.optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        fired, l0 = terms.pop("fired"), terms.pop("l0")  # [layers, d_sae], [layers]
        terms.pop("output")
        since = jnp.where(fired, 0, state.model_state["since_fired"] + 1)
        if a.architecture in BATCH_TOPK:
            params = {**params, "threshold": _threshold_ema(params["threshold"], terms.pop("min_positive"),
                                                            a.threshold_lr)}
        metrics = {**{k: v.mean() for k, v in terms.items()}, "loss": total, "grad_norm": optax.tree.norm(grads),
                   "lr": self.schedule(state.step), "l0": l0.mean(),
                   "dead_latents": jnp.sum(dead) / dead.shape[0], "coefficient": jnp.float32(coefficient)}
        state = state.replace(step=state.step + 1, params=params, opt_state=opt_state,
                              model_state={"since_fired": since})
        return state, metrics

    def eval_step(self, params: Any, batch: Any) -> dict:
        """The training objective of a validation batch (no dead latents, full coefficients), summed over layers."""
        x = batch["inputs"]
        y = batch.get("targets", x)
        totals, terms = jax.vmap(partial(loss, cfg=self.loss_config), in_axes=(0, 1, 1, None, None))(
            self.dictionary(params), x, y, jnp.float32(1.0), None)
        return {"loss": totals.sum(), "mse_loss": terms["mse_loss"].mean()}

    # -- inference-space dictionaries ---------------------------------------------------
    def dictionaries(self, params: Any = None) -> list[Dictionary]:
        """Each layer's dictionary on the model's own (unscaled) activations, decoder norms folded when ranked."""
        params = self.state.params if params is None else params
        in_scale, out_scale = self.scales
        return [unscale(Dictionary.of(self.spec, jax.tree_util.tree_map(lambda v, i=i: v[i], params)),
                        in_scale[i], out_scale[i]) for i in range(len(self.inputs))]

    def validate(self) -> dict[str, float]:
        """SAELens' metrics of every layer recorded on the current node, then the tandem analyses."""
        values = {f"val/{k}": v for k, v in self.evaluate("validation").items()}
        values.update(self.validation_values())
        self.lineage.record(values)
        self.on_validation_end(values)
        self.run_tandem()
        return values

    def validation_values(self) -> dict[str, float]:
        """SAELens' metrics of every layer's dictionary on the validation activations, as `eval/...` values."""
        from .validation import validation_values  # lazy: the evaluation programs are built on first use

        return validation_values(self)

    def on_train_end(self) -> None:
        """Store the activations captured for this run on the model's node (for the next dictionary on them), and
        the feature dashboards on the last node (`sae/dashboards` latents per layer)."""
        while self._unsaved:
            self._unsaved.pop(0)()
        if self.args.dashboards > 0 and self.args.source:
            from .dashboards import write_dashboards  # lazy: only a finished run with a model writes them

            with announced(f"{self.name}: writing the feature dashboards"):
                for layer in range(len(self.inputs)):
                    write_dashboards(self, layer, self.args.dashboards)

    def cleanup(self) -> None:
        """As BaseTrainer's, and release the model trainer read for activations."""
        try:
            super().cleanup()
        finally:
            if self._model_trainer is not None:
                trainer, self._model_trainer = self._model_trainer, None
                trainer.cleanup()


def _threshold_ema(threshold: jax.Array, smallest: jax.Array, rate: float) -> jax.Array:
    """SAELens' BatchTopK threshold: per layer, an EMA of the smallest positive latent of the batch [layers]."""
    moved = (1 - rate) * threshold + rate * smallest[:, None]
    return jnp.where(jnp.isfinite(smallest)[:, None], moved, threshold)
