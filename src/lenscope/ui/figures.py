"""Figures for the browser: a stored PDF's first page rendered to PNG on the server, cached by content digest.

PDF stays the stored original; rendering on demand (pypdfium2, ~15 ms a figure) costs training
nothing and adds nothing to the store, and old stores get previews too (docs/ui.md has the numbers).
"""

from __future__ import annotations

import io
import math
import threading
from collections import OrderedDict

import pypdfium2

SCALE = 2.0  # PDF points (1/72 in) to pixels: 144 dpi, sharp on high-density screens
CACHE_BYTES = 64 << 20
MAX_PIXELS = 4_000_000  # a rendering's pixel budget: a huge page is drawn smaller, never at 144 dpi
MAX_PDF_BYTES = 64 << 20  # a larger stored PDF is not rendered (its download link stays)
_PDFIUM = threading.Lock()  # PDFium is not thread-safe: one rendering at a time, bounded by the pixel budget


class FigureError(ValueError):
    """A stored figure that cannot be rendered (not a PDF, or a damaged one)."""


class PngCache:
    """PNG renderings of PDFs, keyed by the PDF's SHA-256, least recently used dropped past a byte budget."""

    def __init__(self, budget: int = CACHE_BYTES) -> None:
        self.budget = budget
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()  # guards the cache only: a cached figure never waits for a rendering

    def png(self, digest: str, pdf: bytes) -> bytes:
        """The PNG of the first page of `pdf` (whose SHA-256 is `digest`), rendered once."""
        with self._lock:
            if digest in self._items:
                self._items.move_to_end(digest)
                return self._items[digest]
        png = render_pdf(pdf)
        with self._lock:
            if digest not in self._items:
                self._items[digest] = png
                self._size += len(png)
            while self._size > self.budget and len(self._items) > 1:
                self._size -= len(self._items.popitem(last=False)[1])
        return png


def render_pdf(pdf: bytes, scale: float = SCALE, max_pixels: int = MAX_PIXELS) -> bytes:
    """The first page of `pdf` as PNG bytes on a white background, within `max_pixels`; FigureError if unreadable."""
    with _PDFIUM:
        try:
            document = pypdfium2.PdfDocument(pdf)
        except pypdfium2.PdfiumError as error:
            raise FigureError(f"not a readable PDF: {error}") from None
        try:
            if len(document) == 0:
                raise FigureError("the PDF has no pages")
            page = document[0]
            image = page.render(scale=fitted_scale(page.get_size(), scale, max_pixels),
                                fill_color=(255, 255, 255, 255)).to_pil()
        except pypdfium2.PdfiumError as error:
            raise FigureError(f"the PDF cannot be rendered: {error}") from None
        finally:
            document.close()
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def fitted_scale(size: tuple[float, float], scale: float, max_pixels: int) -> float:
    """`scale`, or less so that a page of `size` points renders to at most `max_pixels` pixels."""
    width, height = (max(1.0, float(side)) for side in size)
    if not (math.isfinite(width) and math.isfinite(height)):
        raise FigureError(f"the PDF's page size {size} is not finite")
    return min(scale, math.sqrt(max_pixels / (width * height)))
