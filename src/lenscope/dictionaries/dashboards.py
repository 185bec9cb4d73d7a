"""Feature dashboards: per latent, its top-activating contexts, quantile samples, activation histogram and logit
effects, as one Parquet table (one row per latent) on the dictionary's node; the UI shows a page per feature.

Contexts are the model's input tokens around the activating one (± `context`), as strings from the model
trainer's `token_strings(ids)` when it has one (grokking: `a`, `b`, `=`), else the token ids. Logit effects
are the latent's decoder row through the model's unembedding (`unembed(params, row) - unembed(params, 0)`),
when the trainer defines `unembed` and the row has the residual stream's width. A crosscoder's latent fires on all
its checkpoints' activations of a token together, so its contexts are shared; its row adds `checkpoints`, one entry
per checkpoint read: the step, its decoder-norm share and norm there, and that checkpoint's logit effects.
"""

from __future__ import annotations

import io
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import UsageError
from .config import CrosscoderConfig
from .crosscoder_records import decoder_shares

ARTIFACT = "features.parquet"
LOGIT_KEYS = ("top_logit_tokens", "top_logit_values", "bottom_logit_tokens", "bottom_logit_values")
CHUNK = 4096


def latent_activations(d: Any, x: np.ndarray) -> np.ndarray:
    """Dictionary `d`'s latents [tokens, d_sae] of activations x [tokens, d_in], encoded CHUNK tokens at a time."""
    encode = jax.jit(lambda d, x: d.encode(x))
    return np.concatenate([np.asarray(encode(d, jnp.asarray(x[s:s + CHUNK]))) for s in range(0, len(x), CHUNK)])


def _strings(model: Any, ids: np.ndarray) -> list[str]:
    if hasattr(model, "token_strings"):
        return [str(t) for t in model.token_strings(np.asarray(ids))]
    return [str(int(t)) for t in ids]


def _context(model: Any, tokens: np.ndarray | None, example: int, position: int, width: int) -> tuple[list[str], int]:
    """The tokens around `position` of `example` and the activating token's index among them."""
    if tokens is None:
        return [f"example {example}"], 0
    row = np.asarray(tokens[example]).reshape(-1)
    start = max(position - width, 0)
    return _strings(model, row[start:position + width + 1]), position - start


def _logit_effects(model: Any, rows: jax.Array, n: int) -> list[dict[str, Any]]:
    """Top and bottom `n` output tokens of each decoder row [latents, d] through the unembedding (or empty lists)."""
    try:
        logits = np.asarray(model.unembed(model.state.params, rows) - model.unembed(model.state.params,
                                                                                  jnp.zeros_like(rows[:1])))
    except (UsageError, TypeError, ValueError):  # no unembedding, or not of this width: the dashboard goes without
        return [dict.fromkeys(LOGIT_KEYS, []) for _ in range(len(rows))]
    out = []
    for row in logits.reshape(len(rows), -1):
        order = np.argsort(-row)
        top, bottom = order[:n], order[::-1][:n]
        out.append({"top_logit_tokens": _strings(model, top), "top_logit_values": row[top].tolist(),
                    "bottom_logit_tokens": _strings(model, bottom), "bottom_logit_values": row[bottom].tolist()})
    return out


def _checkpoint_effects(trainer: Any, d: Any, shown: list[int], n: int) -> list[list[dict[str, Any]]]:
    """Per shown latent of a crosscoder, per checkpoint it read: the step, the latent's decoder-norm share and norm
    there, and the logit effects of its decoder block for that checkpoint (the last site's, with several) through
    that checkpoint's own unembedding."""
    norms, shares = decoder_shares(trainer)
    width = d.W_dec.shape[-1] // len(trainer.blocks)
    rows = jnp.asarray(d.W_dec)[np.asarray(shown, np.int32)]
    out: list[list[dict[str, Any]]] = [[] for _ in shown]
    for i, node in enumerate(trainer.checkpoints):
        block = max(b for b, (step, _) in enumerate(trainer.blocks) if step == node.seq)
        model = trainer.model_at(node)
        try:
            effects = _logit_effects(model, rows[:, block * width:(block + 1) * width], n)
        finally:
            model.cleanup()
        for latent, effect, column in zip(shown, effects, out):
            column.append({"step": int(node.seq), "share": float(shares[latent, i]), "norm": float(norms[latent, i]),
                           **effect})
    return out


def dashboard_rows(trainer: Any, layer: int = 0, top: int = 32, examples: int = 8, context: int = 5,
                   bins: int = 24) -> list[dict[str, Any]]:
    """One dict per shown latent (the `top` most often firing), from the validation activations."""
    model = trainer.model_trainer()
    d = trainer.dictionaries()[layer]
    acts = trainer.activations["validation"]
    latents = latent_activations(d, acts.sites[trainer.inputs[layer]])
    split = "validation" if "validation" in model.data.splits else trainer.args.split
    tokens = model.data.splits[split].get("inputs")
    density = (latents > 0).mean(0)
    shown = [int(j) for j in np.argsort(-density, kind="stable")[:top] if density[j] > 0]
    crosscoder = isinstance(trainer.args, CrosscoderConfig)
    per_checkpoint = _checkpoint_effects(trainer, d, shown, 5) if crosscoder and shown else [[] for _ in shown]
    if crosscoder:  # the feature's own logit effects: its last checkpoint's
        effects = [{k: v for k, v in steps[-1].items() if k in LOGIT_KEYS} for steps in per_checkpoint]
    else:
        effects = _logit_effects(model, jnp.asarray(d.W_dec)[np.asarray(shown, np.int32)], 5) if shown else []
    rows = []
    for j, effect, checkpoints in zip(shown, effects, per_checkpoint):
        column = latents[:, j]
        firing = np.flatnonzero(column > 0)
        ranked = firing[np.argsort(-column[firing], kind="stable")]
        picks = {"top": ranked[:examples],
                 "quantile": ranked[np.linspace(0, len(ranked) - 1, min(examples, len(ranked))).astype(int)]}
        row: dict[str, Any] = {"latent": j, "density": float(density[j]), "max_activation": float(column.max()),
                               "mean_activation": float(column[firing].mean())}
        for name, idx in picks.items():
            contexts = [_context(model, tokens, int(acts.example[t]), int(acts.position[t]), context) for t in idx]
            row[f"{name}_activation"] = column[idx].astype(float).tolist()
            row[f"{name}_context"] = [c for c, _ in contexts]
            row[f"{name}_highlight"] = [h for _, h in contexts]
        counts, edges = np.histogram(column[firing], bins=bins)
        row.update(hist_counts=counts.tolist(), hist_edges=edges.astype(float).tolist(), **effect)
        if crosscoder:
            row["checkpoints"] = checkpoints
        rows.append(row)
    return rows


def to_parquet(rows: list[dict[str, Any]]) -> bytes:
    """The dashboard rows as Parquet bytes."""
    import pyarrow as pa  # lazy: pyarrow is needed only when dashboards are written
    import pyarrow.parquet as pq  # lazy: as above

    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue()


def artifact_name(layer: int) -> str:
    """`features.parquet` for layer 0, `features_L.parquet` for layer L."""
    return ARTIFACT if layer == 0 else f"features_{layer}.parquet"


def write_dashboards(trainer: Any, layer: int = 0, top: int = 32) -> int:
    """Store the dashboards of `layer` on the trainer's current node (`artifact_name(layer)`); the latents shown."""
    rows = dashboard_rows(trainer, layer, top)
    if trainer.is_writer:
        name = artifact_name(layer)
        trainer.lineage.save(trainer.results_dir() / name, name, to_parquet(rows))
    return len(rows)
