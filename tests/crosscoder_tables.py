"""Crosscoder tables for the UI's tests: one as `crosscoder_records.share_table` writes it (random births), one that is
no crosscoder's, the order the timeline page should draw a table's latents in (computed with NumPy from the table),
and the order a page draws them in."""

from __future__ import annotations

import io
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lenscope.ui.crosscoder_data import BIRTH_FRACTION, MAX_ROWS

HOSTILE = "<img src=x onerror=alert(1)>.parquet"


def crosscoder_table(latents: int, steps: list[int], seed: int, dead: float = 0.25) -> bytes:
    """A crosscoder table as `crosscoder_records.share_table` writes it: each latent mostly absent before a random
    checkpoint and present from it on; a fraction `dead` of them never fires."""
    rng = np.random.default_rng(seed)
    shares = rng.random((latents, len(steps))) * 0.02
    for i, start in enumerate(rng.integers(0, len(steps), latents)):
        shares[i, start:] += rng.uniform(0.5, 1.5, len(steps) - start)
    shares /= shares.sum(1, keepdims=True)
    norms = shares * rng.uniform(0.5, 2.0, (latents, 1))
    density = rng.uniform(1e-4, 0.1, latents) * (rng.random(latents) >= dead)
    columns = {"latent": pa.array(np.arange(latents, dtype=np.int32)), "density": pa.array(density.astype(np.float32))}
    columns.update({f"share_step_{s}": pa.array(shares[:, i].astype(np.float32)) for i, s in enumerate(steps)})
    columns.update({f"norm_step_{s}": pa.array(norms[:, i].astype(np.float32)) for i, s in enumerate(steps)})
    sink = io.BytesIO()
    pq.write_table(pa.table(columns), sink)
    return sink.getvalue()


def other_table() -> bytes:
    """A Parquet table that is no crosscoder's (no `latent`, no `share_step_S`)."""
    sink = io.BytesIO()
    pq.write_table(pa.table({"x": [1, 2]}), sink)
    return sink.getvalue()


def expected_rows(table: bytes, max_rows: int = MAX_ROWS) -> tuple[list[int], list[int]]:
    """(latents, their birth steps) in the page's order, computed from the table with NumPy: the `max_rows` most
    often firing live latents by birth (then share at birth, descending; then id), then dead ones by the same."""
    t = pq.read_table(io.BytesIO(table))
    steps = sorted(int(c.removeprefix("share_step_")) for c in t.column_names if c.startswith("share_step_"))
    shares = np.stack([t.column(f"share_step_{s}").to_numpy().astype(np.float64) for s in steps], axis=1)
    latent, density = t.column("latent").to_numpy(), t.column("density").to_numpy()
    born = np.argmax(shares >= BIRTH_FRACTION / len(steps), axis=1)
    at_birth = shares[np.arange(len(shares)), born]
    live = np.flatnonzero(density > 0)
    live = live[np.lexsort((latent[live], -density[live]))][:max_rows]
    dead = np.flatnonzero(density <= 0)

    def by_birth(rows: np.ndarray) -> list[int]:
        return list(rows[np.lexsort((latent[rows], -at_birth[rows], born[rows]))])

    rows = by_birth(live) + by_birth(dead)[:max(0, max_rows - len(live))]
    return [int(latent[r]) for r in rows], [steps[born[r]] for r in rows]


def drawn_rows(html: str) -> tuple[list[int], list[int]]:
    """(latents, birth steps) of the rows a timeline page draws, in order."""
    found = re.findall(r'<g class="row[^"]*" data-latent="(\d+)" data-birth="(\d+)"', html)
    return [int(a) for a, _ in found], [int(b) for _, b in found]
