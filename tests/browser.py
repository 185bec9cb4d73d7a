"""What the browser tests share (a pytest plugin of tests/conftest.py): where Chromium is and how it is launched,
a `lenscope ui` subprocess, and the fixtures `browser`, `page` and `server` (over the module's `ui_store`).

A browser test module calls `need_browser()` first (it skips the module when Chromium or Playwright is missing)
and defines a module-scoped `ui_store` fixture: the store folder its pages are served from.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import lenscope_cmd

CHROMIUM = Path(os.environ.get("LENSCOPE_CHROMIUM", "/usr/bin/chromium"))
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def need_browser() -> None:
    """Skip the calling test module, saying what to install, when Chromium or Playwright is missing."""
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install -y chromium (or set $LENSCOPE_CHROMIUM)",
                    allow_module_level=True)
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed: pip install -e '.[test]'")


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


@pytest.fixture(scope="module")
def server(ui_store):
    """`lenscope ui --port 0` on the module's `ui_store`; yields its base URL."""
    with ui_server(ui_store) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium driven by Playwright, launched once per test module."""
    from playwright.sync_api import sync_playwright  # lazy: only the browser tests need Playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    """A fresh light-mode 1280x900 page whose console errors and uncaught exceptions fail the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="light")
    opened = context.new_page()
    errors: list[str] = []
    opened.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert errors == [], errors


def shoot(page, path: Path) -> None:
    """A full-page screenshot at `path` (in the test's tmp dir); a copy into $LENSCOPE_UI_SHOTS when it is set."""
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("LENSCOPE_UI_SHOTS"):
        shutil.copy(path, Path(os.environ["LENSCOPE_UI_SHOTS"]) / path.name)
