"""Figures for the browser: a stored PDF's first page rendered to PNG on the server, cached by content digest.

PDF stays the stored original; rendering on demand (pypdfium2, ~15 ms a figure) costs training
nothing and adds nothing to the store, and old stores get previews too (docs/ui.md has the numbers).
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict

import pypdfium2

SCALE = 2.0  # PDF points (1/72 in) to pixels: 144 dpi, sharp on high-density screens
CACHE_BYTES = 64 << 20


class FigureError(ValueError):
    """A stored figure that cannot be rendered (not a PDF, or a damaged one)."""


class PngCache:
    """PNG renderings of PDFs, keyed by the PDF's SHA-256, least recently used dropped past a byte budget."""

    def __init__(self, budget: int = CACHE_BYTES) -> None:
        self.budget = budget
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()  # PDFium is not thread-safe: one rendering at a time

    def png(self, digest: str, pdf: bytes) -> bytes:
        """The PNG of the first page of `pdf` (whose SHA-256 is `digest`), rendered once."""
        with self._lock:
            if digest in self._items:
                self._items.move_to_end(digest)
                return self._items[digest]
            png = render_pdf(pdf)
            self._items[digest] = png
            self._size += len(png)
            while self._size > self.budget and len(self._items) > 1:
                self._size -= len(self._items.popitem(last=False)[1])
            return png


def render_pdf(pdf: bytes, scale: float = SCALE) -> bytes:
    """The first page of `pdf` as PNG bytes on a white background; FigureError if it cannot be read."""
    try:
        document = pypdfium2.PdfDocument(pdf)
    except pypdfium2.PdfiumError as error:
        raise FigureError(f"not a readable PDF: {error}") from None
    try:
        if len(document) == 0:
            raise FigureError("the PDF has no pages")
        image = document[0].render(scale=scale, fill_color=(255, 255, 255, 255)).to_pil()
        out = io.BytesIO()
        image.save(out, format="PNG")
        return out.getvalue()
    finally:
        document.close()
