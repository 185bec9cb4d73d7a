"""What a notebook shows for a loaded model and an ActivationCache (`_repr_html_`): small self-contained HTML tables,
every name escaped, no script, style or outside resource."""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ["MAX_ROWS", "cache_html", "model_html", "table"]

MAX_ROWS = 24  # a cache longer than this shows its first and last rows, and how many were left out
CELL = "padding:1px 8px;text-align:left;font-family:monospace"


def table(title: str, rows: Iterable[tuple[Any, Any]], note: str = "") -> str:
    """An HTML table of (name, value) rows under `title`, every text escaped."""
    body = "".join(f'<tr><th style="{CELL}">{html.escape(str(k))}</th><td style="{CELL}">{html.escape(str(v))}</td>'
                   "</tr>" for k, v in rows)
    foot = f'<div style="opacity:0.7">{html.escape(note)}</div>' if note else ""
    return (f'<div class="lenscope-repr"><b>{html.escape(title)}</b><table style="border-collapse:collapse">'
            f"{body}</table>{foot}</div>")


def _count(n: int) -> str:
    """A parameter count as people say it: 124.4M, 31.5K, 812."""
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def model_html(model: Any) -> str:
    """A loaded model (Pretrained): family, sizes, parameters, hook points, dtype and where it was read from."""
    cfg = model.config
    leaves = [leaf for leaf in _arrays(model.params)]
    n_params = sum(int(np.prod(leaf.shape)) for leaf in leaves)
    dtypes = sorted({str(leaf.dtype) for leaf in leaves})
    rows = [("family", cfg.family), ("layers", cfg.n_layers), ("d_model", cfg.d_model),
            ("heads", f"{cfg.n_heads} (key/value heads {cfg.n_kv_heads})" if cfg.n_kv_heads != cfg.n_heads
             else cfg.n_heads),
            ("d_head", cfg.d_head), ("d_mlp", cfg.d_mlp), ("vocabulary", cfg.vocab_size),
            ("positions", cfg.n_positions if cfg.n_positions else "rotary"),
            ("parameters", f"{_count(n_params)} ({n_params:,})"), ("hook points", len(model.hook_names())),
            ("dtype", ", ".join(dtypes)), ("path", model.path)]
    return table(f"Pretrained {cfg.family}", rows)


def _arrays(tree: Any) -> Iterable[Any]:
    """The arrays of nested dicts."""
    for value in tree.values():
        if isinstance(value, dict):
            yield from _arrays(value)
        else:
            yield value


def cache_html(cache: Any) -> str:
    """An ActivationCache: each hook's dotted name and shape (the first and last rows of a long cache)."""
    names = list(cache)
    shown = names if len(names) <= MAX_ROWS else names[:MAX_ROWS // 2] + names[-MAX_ROWS // 2:]
    rows = [(name, f"{tuple(np.shape(cache[name]))} {getattr(cache[name], 'dtype', '')}") for name in shown]
    if len(shown) < len(names):
        rows.insert(MAX_ROWS // 2, ("...", f"{len(names) - len(shown)} more hooks"))
    note = "" if cache.has_batch_dim else "batch dimension removed"
    return table(f"ActivationCache: {len(names)} hooks", rows, note)
