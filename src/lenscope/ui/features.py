"""Feature dashboards (a dictionary's `features.parquet`): a list of its latents and a page per feature."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from lenscope.ui.nodes import Missing, artifact_file, artifact_info, parse_node
from lenscope.ui.tables import TableError, columns

HIST_W, HIST_H = 420, 120
MAX_TABLE_BYTES = 64 << 20  # a dashboard table these pages parse whole; a larger one is refused unread
NUMBERS = ("density", "max_activation", "mean_activation")


def _rows(request: Request) -> tuple[Any, Any, str, list[dict[str, Any]]]:
    """(ui, node, artifact name, the dashboard rows) of the request's artifact."""
    ui = request.app.state.ui
    node = parse_node(request.path_params["address"])
    name = request.path_params["name"]
    if not (name.startswith("features") and name.endswith(".parquet")):
        raise Missing(f"{name!r} is not a feature-dashboard table (features.parquet, features_1.parquet, ...)")
    info = artifact_info(ui.store, node, name)
    if info.size > MAX_TABLE_BYTES:
        raise Missing(f"{name} on {node.address} is too large to show here ({info.size} bytes; at most "
                      f"{MAX_TABLE_BYTES}): download it")
    try:
        rows = table_rows(artifact_file(ui.store, info), name)
    except Missing:
        raise
    except TableError as error:
        raise Missing(f"{name} on {node.address} cannot be shown: {error}") from None
    except Exception as error:  # _clean: a TypeError or KeyError
        raise Missing(f"{name} on {node.address} is not a readable dashboard table: {error}") from None
    return ui, node, name, rows


def table_rows(content: bytes | Path, what: str) -> list[dict[str, Any]]:
    """The rows of a dashboard table (features.parquet: bytes or a path), cleaned for the feature page."""
    table = columns(content, what)
    names = list(table)
    return [_clean(dict(zip(names, values))) for values in zip(*table.values())]


def _finite(value: Any) -> float | None:
    """A number as a float, None for None, NaN, infinities and anything that is no number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    """A dashboard row whose numbers are finite floats or None, and whose lists are lists (None: empty)."""
    row = dict(row)
    for key in NUMBERS:
        row[key] = _finite(row.get(key))
    for kind in ("top", "quantile"):
        row[f"{kind}_activation"] = [_finite(a) for a in row.get(f"{kind}_activation") or []]
        row[f"{kind}_context"] = [list(c or []) for c in row.get(f"{kind}_context") or []]
        row[f"{kind}_highlight"] = [int(h) if isinstance(h, int) and h >= 0 else 0
                                    for h in row.get(f"{kind}_highlight") or []]
    row["hist_counts"] = [max(int(_finite(c) or 0), 0) for c in row.get("hist_counts") or []]
    row["hist_edges"] = [e for e in (_finite(e) for e in row.get("hist_edges") or []) if e is not None]
    _clean_logits(row)
    row["checkpoints"] = [_clean_checkpoint(c) for c in row.get("checkpoints") or [] if isinstance(c, dict)]
    return row


def _clean_logits(row: dict[str, Any]) -> None:
    """A row's (or a checkpoint entry's) logit effects as lists of strings and finite floats or None."""
    for kind in ("top", "bottom"):
        row[f"{kind}_logit_tokens"] = [str(t) for t in row.get(f"{kind}_logit_tokens") or []]
        row[f"{kind}_logit_values"] = [_finite(v) for v in row.get(f"{kind}_logit_values") or []]


def _clean_checkpoint(entry: dict[str, Any]) -> dict[str, Any]:
    """One checkpoint of a crosscoder latent's dashboard: its step, share and norm there, its logit effects."""
    entry = dict(entry)
    step = entry.get("step")
    entry["step"] = step if isinstance(step, int) and not isinstance(step, bool) else None
    entry["share"], entry["norm"] = _finite(entry.get("share")), _finite(entry.get("norm"))
    _clean_logits(entry)
    return entry


def _logits(row: dict[str, Any]) -> list[tuple[str, list[tuple[str, float | None]]]]:
    """[(kind, [(token, value)])] of the tokens a decoder row raises (`top`) and lowers (`bottom`) most."""
    return [(kind, list(zip(row[f"{kind}_logit_tokens"], row[f"{kind}_logit_values"]))) for kind in ("top", "bottom")]


def _chosen(checkpoints: list[dict[str, Any]], text: str | None) -> dict[str, Any] | None:
    """The checkpoint `?step=` names (the last one by default; None without checkpoints)."""
    if not checkpoints:
        return None
    if text is None:
        return checkpoints[-1]
    found = next((c for c in checkpoints if str(c["step"]) == text), None)
    if found is None:
        raise Missing(f"step {text!r} is not a checkpoint of this feature's crosscoder; its checkpoints: "
                      f"{', '.join(str(c['step']) for c in checkpoints)}")
    return found


def _samples(row: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """Contexts of one kind (`top`, `quantile`) as [{activation, before, token, after, level}]; the level (1-4)
    shades the marked token by its activation relative to the latent's maximum."""
    out, peak = [], row["max_activation"] or 1.0
    for act, context, at in zip(row[f"{kind}_activation"], row[f"{kind}_context"], row[f"{kind}_highlight"]):
        level = 1 if act is None else round(min(4.0, max(1.0, 4 * act / peak)))
        out.append({"activation": act, "before": context[:at], "token": context[at] if at < len(context) else "",
                    "after": context[at + 1:], "level": level})
    return out


def _histogram(row: dict[str, Any]) -> list[dict[str, float]]:
    """The activation histogram as SVG bars (x, y, width, height) in a HIST_W x HIST_H box."""
    counts = row.get("hist_counts") or []
    top = max(counts) if counts else 0
    if not top:
        return []
    width = HIST_W / len(counts)
    return [{"x": i * width, "w": max(width - 1, 1), "h": HIST_H * c / top, "y": HIST_H - HIST_H * c / top, "n": c}
            for i, c in enumerate(counts)]


def features(request: Request) -> Response:
    """Every latent of a dashboard table: how often it fires, how strongly, its top context."""
    ui, node, name, rows = _rows(request)
    latents = [{**row, "first": (_samples(row, "top") or [None])[0]} for row in rows]
    return ui.page("features.html", title=f"features of {node.address}", node=node, name=name, latents=latents)


def feature(request: Request) -> Response:
    """One feature: top-activating and quantile contexts, the activation histogram, logit effects; a crosscoder's
    feature also its share and logit effects at each checkpoint, `?step=S` choosing the one shown in full."""
    ui, node, name, rows = _rows(request)
    latent = request.path_params["latent"]
    row = next((r for r in rows if str(r["latent"]) == latent), None)
    if row is None:
        raise Missing(f"latent {latent} has no dashboard in {name} on {node.address}")
    return ui.page("feature.html", title=f"feature {latent} of {node.address}", node=node, name=name,
                   **feature_context(row, request.query_params.get("step")))


def feature_context(row: dict[str, Any], step: str | None = None) -> dict[str, Any]:
    """What feature.html draws of one cleaned dashboard row (`step`: a crosscoder's checkpoint shown in full)."""
    chosen = _chosen(row["checkpoints"], step)
    edges = row.get("hist_edges") or [0.0, 0.0]
    return dict(row=row, top=_samples(row, "top"), quantile=_samples(row, "quantile"), bars=_histogram(row),
                width=HIST_W, height=HIST_H, low=edges[0], high=edges[-1],
                logits=_logits(chosen if chosen is not None else row), chosen=chosen,
                checkpoints=[{**c, "raises": c["top_logit_tokens"][:3], "lowers": c["bottom_logit_tokens"][:3]}
                             for c in row["checkpoints"]])
