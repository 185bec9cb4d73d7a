"""How an artifact is shown and served: its kind, its readable text, and safe download headers."""

from __future__ import annotations

import json
import mimetypes
import re
from pathlib import PurePosixPath
from urllib.parse import quote

from lenscope.ui.lineage_page import is_figure

MAX_TEXT = 1 << 20  # bytes of a JSON or text artifact shown on a page; the download has all of it
MAX_JSON_DEPTH = 100  # nesting a JSON preview pretty-prints; deeper JSON is shown as it is stored
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
TEXT_SUFFIXES = frozenset({".txt", ".log", ".md", ".yaml", ".yml", ".csv", ".tsv", ".py", ".toml", ".ini", ".error"})
_RASTER = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
           ".webp": "image/webp", ".svg": "image/svg+xml"}


def kind(filename: str) -> str:
    """How the page shows an artifact: figure, json, table, text or binary (a download link only)."""
    suffix = PurePosixPath(filename).suffix.lower()
    if is_figure(filename):
        return "figure"
    if suffix == ".json":
        return "json"
    if suffix == ".parquet":
        return "table"
    if suffix in TEXT_SUFFIXES or filename.endswith(".error.txt"):
        return "text"
    return "binary"


def is_pdf(filename: str) -> bool:
    """Whether the figure is a PDF (rendered to PNG for the browser) rather than an image it shows itself."""
    return PurePosixPath(filename).suffix.lower() == ".pdf"


def image_type(filename: str) -> str | None:
    """The content type of an image the browser shows as it is stored, or None."""
    return _RASTER.get(PurePosixPath(filename).suffix.lower())


def readable(content: bytes, as_json: bool, size: int | None = None) -> tuple[str, bool]:
    """(text to show, whether it was cut): JSON pretty-printed when it parses, other bytes decoded as UTF-8.

    `content` may be only the first bytes of an artifact of `size` bytes; JSON is pretty-printed only
    when whole and at most MAX_JSON_DEPTH deep (parsing deeper nesting would recurse without bound).
    """
    cut = max(len(content), size or 0) > MAX_TEXT
    if as_json and not cut and json_depth(content) <= MAX_JSON_DEPTH:
        try:
            return json.dumps(json.loads(content), indent=2, ensure_ascii=False), False
        except (ValueError, UnicodeDecodeError, RecursionError):
            pass
    return content[:MAX_TEXT].decode("utf-8", errors="replace"), cut


def json_depth(content: bytes) -> int:
    """The deepest nesting of arrays and objects in JSON text (strings skipped), counted without parsing."""
    depth = deepest = 0
    for char in _JSON_STRING.sub(b"", content).translate(None, delete=_NOT_BRACKETS):
        depth += 1 if char in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")


def content_type(filename: str) -> str:
    """The type an artifact is served with: guessed from its filename, else application/octet-stream."""
    guessed, encoding = mimetypes.guess_type(filename, strict=False)
    if guessed is None or encoding is not None:
        return "application/octet-stream"
    return guessed


def disposition(filename: str) -> str:
    """A Content-Disposition that saves the artifact under its own name, quoted so no header can be injected."""
    fallback = "".join(c if c.isascii() and c.isprintable() and c not in '"\\;%' else "_" for c in filename)
    return f"attachment; filename=\"{fallback or 'artifact'}\"; filename*=UTF-8''{quote(filename, safe='')}"
