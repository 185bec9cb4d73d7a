"""What SaeTrainer records at validation: SAELens' metrics per layer, the spliced losses, the density figure."""

from __future__ import annotations

import io
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..capture import backend_for
from ..capture.patch import patched
from .evaluate import add, finish, reconstruction_sums, spliced
from .features import Attached, attach, run_with_features

CHUNK = 8192  # tokens per evaluation program call


def run_zeroed(fn: Any, args: tuple, a: Attached, backend: Any) -> Any:
    """fn(*args) with the activation a dictionary replaces set to zero (SAELens' zero ablation of its hook)."""
    site = a.site
    if a.dictionary.spec.transcoder or site.arg is None:
        return patched(fn, args, {site.path: jnp.zeros_like}, on="output", backend=backend)
    return patched(fn, args, {site.path: lambda inputs: inputs.replace(**{site.arg: jnp.zeros_like(inputs[site.arg])})},
                   on="inputs", backend=backend)


def _spliced_program(trainer: Any) -> Any:
    """One jitted program: the model's loss and logits clean, with a dictionary spliced in, and with its site zeroed."""
    model = trainer.model_trainer()
    backend = backend_for(model.model)

    def program(d: Any, site: str, state: Any, batch: Any, key: jax.Array) -> dict[str, jax.Array]:
        a = attach(d, site)

        def both(patch: str | None) -> tuple[jax.Array, jax.Array]:
            outs = []
            for fn in (lambda: model.loss(state.params, batch, key)[0], lambda: model.trace(state, batch, key)):
                if patch is None:
                    outs.append(fn())
                elif patch == "sae":
                    outs.append(run_with_features(fn, (), [a], error=False, backend=backend)[0])
                else:
                    outs.append(run_zeroed(fn, (), a, backend))
            return outs[0], outs[1]

        return spliced(both, "sae", "ablate")

    return jax.jit(program, static_argnums=1)


def validation_values(trainer: Any) -> dict[str, float]:
    """SAELens' metrics of each layer's dictionary on the validation activations, as `eval/...` values."""
    args, acts = trainer.args, trainer.activations["validation"]
    dictionaries = trainer.dictionaries()
    sums_fn = trainer.__dict__.setdefault("_eval_sums", jax.jit(reconstruction_sums))
    values: dict[str, float] = {}
    densities = []
    for i, (d, site, target) in enumerate(zip(dictionaries, trainer.inputs, trainer.outputs)):
        x, y = acts.sites[site], acts.sites[target]
        sums = None
        for start in range(0, len(x), CHUNK):
            sums = add(sums, sums_fn(d, jnp.asarray(x[start:start + CHUNK]), jnp.asarray(y[start:start + CHUNK])))
        metrics, density = finish(jax.device_get(sums), dense=args.dense)
        densities.append(np.asarray(density))
        if args.eval_spliced:
            model = trainer.model_trainer()
            program = trainer.__dict__.setdefault("_eval_spliced", _spliced_program(trainer))
            split = "validation" if "validation" in model.data.splits else args.split
            batch = model.batch(split, 0)
            out = program(d, site, model.state, batch, jax.random.PRNGKey(0))
            metrics.update({k: float(v) for k, v in jax.device_get(out).items()})
        prefix = "eval/" if len(dictionaries) == 1 else f"eval/{i}/"
        values.update({prefix + k: float(v) for k, v in metrics.items()})
    if trainer.is_writer:
        content = density_figure(densities, trainer.inputs, int(trainer.state.step))
        trainer.lineage.save(trainer.results_dir() / "density.pdf", "density", content)
    return values


def density_figure(densities: list[np.ndarray], sites: list[str], step: int) -> bytes:
    """PDF bytes of each layer's latent-density histogram (log10 of the fraction of tokens a latent fires on)."""
    from matplotlib.figure import Figure  # lazy: matplotlib is needed only for the figure

    fig = Figure(figsize=(4.2 * len(densities), 3.0))
    for i, (density, site) in enumerate(zip(densities, sites)):
        ax = fig.add_subplot(1, len(densities), i + 1)
        dead = int(np.sum(density == 0))
        ax.hist(np.log10(density[density > 0]), bins=40, range=(-6, 0), color="#3b6ea8")
        ax.set_xlabel("log10 density (fraction of tokens firing)")
        ax.set_ylabel("latents")
        ax.set_title(f"{site} at step {step}: {dead} dead", fontsize=9)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="pdf")
    return buffer.getvalue()
