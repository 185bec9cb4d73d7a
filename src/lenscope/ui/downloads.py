"""Bytes and JSON: artifact downloads (exact stored bytes), figures as PNG, and the endpoints pages poll."""

from __future__ import annotations

import math
from dataclasses import asdict

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from lenscope.ui import content
from lenscope.ui.figures import MAX_PDF_BYTES, FigureError
from lenscope.ui.lineage_list import lineage_rows, parse_lineage, with_liveness
from lenscope.ui.live import stamp
from lenscope.ui.nodes import ArtifactInfo, Missing, artifact_chunks, artifact_content, artifact_info, parse_node
from lenscope.ui.pages import _lineage, _ui, curves_json
from lenscope.ui.params import number
from lenscope.ui.series import lineage_keys, load_curves

IMMUTABLE = "public, max-age=31536000, immutable"  # a stored version never changes


def _requested(request: Request):
    ui = _ui(request)
    target = parse_node(request.path_params["address"])
    version = number(request.query_params.get("version"), "version")
    return ui, artifact_info(ui.store, target, request.path_params["name"], version), version


def artifact(request: Request) -> Response:
    """The exact stored bytes of an artifact version, saved under its own filename."""
    ui, info, version = _requested(request)
    headers = {"Content-Disposition": content.disposition(info.filename), "ETag": f'"{info.sha256}"',
               "Cache-Control": IMMUTABLE if version is not None else "no-cache"}
    return _streamed(ui, info, content.content_type(info.filename), headers)


def _streamed(ui, info: ArtifactInfo, media_type: str, headers: dict[str, str]) -> Response:
    """The artifact's bytes streamed in pieces, hashed on the way: a large download holds one piece in memory."""
    return StreamingResponse(artifact_chunks(ui.store, info), media_type=media_type,
                             headers={**headers, "Content-Length": str(info.size)})


def png(request: Request) -> Response:
    """A figure artifact as the browser shows it: a PDF's first page rendered to PNG, other images as stored."""
    ui, info, version = _requested(request)
    headers = {"ETag": f'"{info.sha256}"', "Cache-Control": IMMUTABLE if version is not None else "no-cache"}
    if content.is_pdf(info.filename):
        if info.size > MAX_PDF_BYTES:
            raise Missing(f"figure {info.name!r} is too large to show here ({info.size} bytes): download it")
        try:
            body = ui.pngs.png(info.sha256, artifact_content(ui.store, info))
        except FigureError as error:
            raise Missing(f"figure {info.name!r} cannot be shown: {error}") from None
        return Response(body, media_type="image/png", headers=headers)
    image = content.image_type(info.filename)
    if image is None:
        raise Missing(f"artifact {info.name!r} ({info.filename}) is not a figure")
    return _streamed(ui, info, image, headers)


def api_runs(request: Request) -> Response:
    """Every lineage's summary row as JSON (what the runs page lists)."""
    keys = request.query_params.getlist("key") or None
    store = _ui(request).store
    rows = [{"lineage": row.lineage, **asdict(row)} for row in with_liveness(store.store, lineage_rows(store, keys))]
    for row in rows:  # JSON has no NaN or infinity: those values travel as text
        row["values"] = {k: v if not isinstance(v, float) or math.isfinite(v) else repr(v)
                         for k, v in row["values"].items()}
    return JSONResponse(rows)


def api_curves(request: Request) -> Response:
    """One lineage's curves as JSON: `?key=K` (repeatable; default every key), thinned like the charts."""
    ui = _ui(request)
    lineage = _lineage(request.path_params["lineage"])
    keys = request.query_params.getlist("key") or lineage_keys(ui.store, lineage)
    return JSONResponse(curves_json(load_curves(ui.store, lineage, keys)))


def api_stamp(request: Request) -> Response:
    """The change stamp of the store, or of `?lineage=NAME@NONCE`; live pages refresh when it changes."""
    text = request.query_params.get("lineage")
    lineage = None if text is None else parse_lineage(text)
    if text is not None and lineage is None:
        raise Missing(f"no run {text!r}")
    return JSONResponse({"stamp": stamp(_ui(request).store, lineage)}, headers={"Cache-Control": "no-store"})
