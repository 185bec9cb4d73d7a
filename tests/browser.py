"""What the browser tests share: where Chromium is, how it is launched, and a `lenscope ui` subprocess."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conftest import lenscope_cmd

CHROMIUM = Path(os.environ.get("LENSCOPE_CHROMIUM", "/usr/bin/chromium"))
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@contextmanager
def ui_server(store: str | os.PathLike) -> Iterator[str]:
    """`lenscope ui --port 0` on `store`; yields its base URL, stops it after."""
    process = subprocess.Popen(lenscope_cmd("ui", "--store", str(store), "--port", "0"),
                               stderr=subprocess.PIPE, text=True)
    try:
        line = process.stderr.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert found, line + process.stderr.read() if process.poll() is not None else line
        yield found.group(0)
    finally:
        process.terminate()
        process.wait(timeout=30)


def flip_to_first(page, book) -> tuple[str, str]:
    """Move a flip-book's slider to its first frame with the keyboard; (the image's src before, after)."""
    image, slider = book.locator("img.figure"), book.locator("input.slider")
    before = image.get_attribute("src")
    slider.focus()
    page.keyboard.press("Home")
    return before, image.get_attribute("src")
