"""The dashboard cards of an attribution graph's features: for each feature whose transcoder node keeps a dashboard,
its page, its top contexts and the logits it pushes (what the graph page shows on hover)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from lenscope.store import StoreReader
from lenscope.store.parquet_reader import batches, check_rows, open_parquet
from lenscope.ui.nodes import Missing, artifact_file, artifact_info, parse_node

MAX_TABLE_BYTES = 64 << 20  # a dashboard table the graph page reads for its feature cards
MAX_TABLE_ROWS = 1 << 18  # its rows, streamed a batch at a time: only the rows of the graph's features are kept
MAX_DECODED = 256 << 20  # its decoded bytes, by its footer (a batch at a time is held)
CONTEXTS, LOGITS = 3, 5  # what a card holds of a dashboard: its top contexts and its top and bottom logits
COLUMNS = ("latent", "top_activation", "top_context", "top_highlight", "top_logit_tokens", "top_logit_values",
           "bottom_logit_tokens", "bottom_logit_values")


def dashboard_table(layer: int) -> str:
    """The dashboard table of a dictionary job's layer: `features.parquet` for layer 0, `features_L.parquet`."""
    return "features.parquet" if layer == 0 else f"features_{layer}.parquet"


def feature_href(scan: str, layer: int, feature: int) -> str:
    """The dashboard page of a feature when the graph's `scan` is the transcoders' node; '' otherwise."""
    if "@" not in scan:
        return ""
    return f"/feature/{quote(scan, safe='')}/{dashboard_table(layer)}/{feature}"


def card_key(layer: int, latent: int) -> str:
    """A card's key in the page's data: `LAYER_LATENT`."""
    return f"{layer}_{latent}"


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _texts(values: Any) -> list[str]:
    return [str(v) for v in values or []]


def _contexts(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The top contexts as {activation, before, token, after} (the tokens joined by spaces, as the dashboard)."""
    out = []
    for act, context, at in list(zip(row.get("top_activation") or [], row.get("top_context") or [],
                                     row.get("top_highlight") or []))[:CONTEXTS]:
        tokens = _texts(context)
        at = at if isinstance(at, int) and 0 <= at < len(tokens) else 0
        out.append({"activation": _finite(act), "before": " ".join(tokens[:at]),
                    "token": tokens[at] if tokens else "", "after": " ".join(tokens[at + 1:])})
    return out


def _logits(row: Mapping[str, Any], kind: str) -> list[list[Any]]:
    """The first LOGITS of a dashboard's top (pushed up: > 0) or bottom (pulled down: < 0) logits; a small vocabulary's
    bottom list can hold raised logits too, and those are not "pulled down"."""
    sign = 1.0 if kind == "top" else -1.0
    pairs = zip(_texts(row.get(f"{kind}_logit_tokens")), row.get(f"{kind}_logit_values") or [])
    kept = [[token, _finite(value)] for token, value in pairs]
    return [pair for pair in kept if pair[1] is not None and sign * pair[1] > 0][:LOGITS]


def card(row: Mapping[str, Any], href: str) -> dict[str, Any]:
    """One feature's card from its dashboard row."""
    return {"href": href, "contexts": _contexts(row), "top_logits": _logits(row, "top"),
            "bottom_logits": _logits(row, "bottom")}


def _table_rows(store: StoreReader, node: Any, layer: int, latents: set[int]) -> list[dict[str, Any]]:
    """The rows of `latents` in a layer's dashboard table, read a batch at a time (only those rows kept); [] when
    there is no readable table, or one past the bounds its footer is checked against before anything is decoded."""
    import pyarrow as pa  # lazy: only graph pages with a transcoder node read tables
    import pyarrow.compute as pc  # lazy: as above

    try:
        info = artifact_info(store, node, dashboard_table(layer))
        if info.size > MAX_TABLE_BYTES:
            return []
        what = f"{info.name} on {node}"
        parquet = open_parquet(artifact_file(store, info), what)
        present = [c for c in COLUMNS if c in parquet.schema_arrow.names]
        check_rows(parquet, what, max_rows=MAX_TABLE_ROWS, max_bytes=MAX_DECODED, columns=present)
        wanted = pa.array(sorted(latents), pa.int64())
        rows: list[dict[str, Any]] = []
        for batch in batches(parquet, what, columns=present, kept=False):
            chosen = pc.is_in(batch.column("latent").cast(pa.int64()), value_set=wanted)
            rows += batch.filter(chosen).to_pylist()
        return rows
    except Exception:  # no such node or table, a damaged or too large one: that layer's features get no cards
        return []


def dashboard_cards(store: StoreReader, scan: str, features: Iterable[tuple[int, int]]) -> dict[str, dict[str, Any]]:
    """The cards of the (layer, latent) `features` that have a dashboard on the transcoders' node `scan` (a
    dictionary job keeps dashboards of its most active latents only), by card_key; {} when `scan` is no node."""
    if "@" not in scan:
        return {}
    try:
        node = parse_node(scan)
    except Missing:
        return {}
    wanted: dict[int, set[int]] = {}
    for layer, latent in features:
        wanted.setdefault(layer, set()).add(latent)
    cards = {}
    for layer, latents in sorted(wanted.items()):
        for row in _table_rows(store, node, layer, latents):
            latent = int(row["latent"])
            cards[card_key(layer, latent)] = card(row, feature_href(scan, layer, latent))
    return cards
