"""What a crosscoder records: SAELens' metrics of each checkpoint's part of it, and each latent's decoder-norm share
per checkpoint, as values and as a table (`crosscoder.parquet`, one row per latent).

A checkpoint's part is the crosscoder seen as that checkpoint's SAE: the shared latents (read from every
checkpoint) and that checkpoint's block of the output, so its reconstruction metrics are its own and its L0 is the
crosscoder's. A latent's share of a checkpoint is the norm of its decoder for that checkpoint (summed over the sites)
over the sum of those norms, measured on the normalized activations the crosscoder trains on: 1 / checkpoints for a
latent all checkpoints use alike, 1 for one only that checkpoint uses.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .core import Dictionary
from .evaluate import add, finish, output_sums

TABLE = "crosscoder.parquet"
EXCLUSIVE = 0.9  # a live latent with at least this share of one checkpoint is exclusive to it
CHUNK = 8192  # tokens per evaluation program call


def block_sums(d: Dictionary, x: jax.Array) -> list[dict[str, jax.Array]]:
    """Per block, `evaluate.output_sums` of its part of x [tokens, blocks * d] and of d's output (traceable)."""
    latents = d.encode(x)
    out = d.decode(latents, x)
    width = x.shape[-1] // d.spec.blocks
    return [output_sums(x[:, b * width:(b + 1) * width], out[:, b * width:(b + 1) * width], latents)
            for b in range(d.spec.blocks)]


def block_label(step: int, site: int, sites: int) -> str:
    """`step_S` (one site), else `step_S/SITE_INDEX`: how a checkpoint's part is named in value keys."""
    return f"step_{step}" if sites == 1 else f"step_{step}/{site}"


def checkpoint_metrics(trainer: Any) -> tuple[dict[str, float], np.ndarray]:
    """(`eval/step_S/NAME`: SAELens' metrics of each checkpoint's part on the validation tokens, each latent's
    firing density [d_sae])."""
    d = trainer.dictionaries()[0]
    x = trainer.activations["validation"].sites[trainer.inputs[0]]
    program = trainer.__dict__.setdefault("_block_sums", jax.jit(block_sums))
    sums: list[Any] = [None] * d.spec.blocks
    for start in range(0, len(x), CHUNK):
        sums = [add(a, b) for a, b in zip(sums, program(d, jnp.asarray(x[start:start + CHUNK])))]
    sites = list(trainer.args.sites)
    values: dict[str, float] = {}
    density = np.zeros(d.spec.d_sae)
    for (step, site), part in zip(trainer.blocks, jax.device_get(sums)):
        metrics, density = finish(part, dense=trainer.args.dense)
        label = block_label(step, sites.index(site), len(sites))
        values.update({f"eval/{label}/{k}": float(v) for k, v in metrics.items()})
    return values, np.asarray(density)


def decoder_shares(trainer: Any) -> tuple[np.ndarray, np.ndarray]:
    """(norms, shares), each [d_sae, checkpoints]: each latent's decoder norm per checkpoint (summed over the sites,
    on the normalized activations it trains on) and its share of their sum (1 / checkpoints where all are zero)."""
    params = jax.tree_util.tree_map(lambda v: v[0], trainer.state.params)
    norms = np.asarray(trainer.dictionary(params).block_norms(), np.float64)  # [d_sae, blocks]
    per_checkpoint = norms.reshape(norms.shape[0], len(trainer.steps), len(trainer.args.sites)).sum(-1)
    total = per_checkpoint.sum(-1, keepdims=True)
    shares = np.where(total > 0, per_checkpoint / np.where(total > 0, total, 1.0), 1.0 / len(trainer.steps))
    return per_checkpoint, shares


def share_values(shares: np.ndarray, live: np.ndarray, steps: Sequence[int]) -> dict[str, float]:
    """Counts of the live latents: all, shared (every share at least half of 1 / checkpoints) and exclusive to each
    checkpoint (a share of at least EXCLUSIVE), and each checkpoint's mean share."""
    alive = shares[live]
    values: dict[str, float] = {"crosscoder/live_latents": int(live.sum()),
                                "crosscoder/shared_latents": int((alive.min(-1) >= 0.5 / len(steps)).sum())}
    for i, step in enumerate(steps):
        values[f"crosscoder/exclusive_latents/step_{step}"] = int((alive[:, i] >= EXCLUSIVE).sum())
        values[f"crosscoder/mean_share/step_{step}"] = float(alive[:, i].mean()) if len(alive) else float("nan")
    return values


def share_table(norms: np.ndarray, shares: np.ndarray, density: np.ndarray, steps: Sequence[int]) -> bytes:
    """Parquet bytes, one row per latent: `latent`, `density`, and per checkpoint `share_step_S` and `norm_step_S`."""
    import pyarrow as pa  # lazy: pyarrow is needed only when the table is written
    import pyarrow.parquet as pq  # lazy: as above

    columns = {"latent": pa.array(np.arange(len(shares), dtype=np.int32)),
               "density": pa.array(np.asarray(density, np.float32))}
    for i, step in enumerate(steps):
        columns[f"share_step_{step}"] = pa.array(shares[:, i].astype(np.float32))
    for i, step in enumerate(steps):
        columns[f"norm_step_{step}"] = pa.array(norms[:, i].astype(np.float32))
    sink = io.BytesIO()
    pq.write_table(pa.table(columns), sink)
    return sink.getvalue()


def records(trainer: Any) -> tuple[dict[str, Any], bytes]:
    """(values, table bytes) a crosscoder records on its last node."""
    values: dict[str, Any] = {}
    metrics, density = checkpoint_metrics(trainer)
    norms, shares = decoder_shares(trainer)
    values.update(metrics)
    values.update(share_values(shares, density > 0, trainer.steps))
    values["crosscoder/steps"] = ",".join(map(str, trainer.steps))
    return values, share_table(norms, shares, density, trainer.steps)
