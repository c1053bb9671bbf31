"""The system Chromium, driven by playwright, for the browser test.

``launch`` starts the Debian ``chromium`` (never a browser playwright downloads) through
``executable_path``. A missing browser skips the test on a developer machine and fails it when
``CI`` is set (``.ci/run`` installs the package, so CI always opens the dashboard in a browser);
a browser that is there but does not start always fails. ``open_page`` waits on a DOM condition
(the title, ``min_charts`` drawn Plotly charts, Streamlit idle) rather than on a fixed delay,
which would capture Streamlit's loading placeholder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright
from playwright.sync_api import Error as PlaywrightError

BINARIES = ("chromium", "chromium-browser")
"""Names of the system Chromium (Debian package ``chromium``; ``chromium-browser`` elsewhere)."""

ARGS = ("--no-sandbox", "--disable-gpu", "--disable-quic", "--hide-scrollbars")

CHARTS_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].map(gd => ({
  title: (gd.layout && gd.layout.title && gd.layout.title.text) || '',
  traces: (gd.data || []).length,
  points: (gd.calcdata || []).map(cd => cd.length).reduce((a, b) => a + b, 0),
  paths: gd.querySelectorAll('.scatterlayer path.js-line, .scatterlayer path.js-fill,'
                             + ' .barlayer path, .heatmaplayer image').length,
}))"""
"""Every Plotly chart on the page: title, trace count, computed points (``gd.calcdata``) and
drawn SVG paths."""

READY_JS = """n => { const t = document.querySelector('h1');
  const plots = [...document.querySelectorAll('.js-plotly-plot')];
  const busy = document.querySelector('[data-testid="stStatusWidget"]');
  return !!t && plots.length >= n && plots.every(p => p.querySelector('.main-svg')) && !busy; }"""

MAIN_HEIGHT_JS = """() => (document.querySelector('[data-testid="stMain"]') || document.body)
  .scrollHeight"""
"""Height of Streamlit's main area (it scrolls inside its own element, not the document)."""


def require_chromium() -> str:
    """The system Chromium's path; skips the test, or fails it under ``CI``, when there is none."""
    exe = next((p for p in map(shutil.which, BINARIES) if p), None)
    if exe is None:
        why = f"no system Chromium ({' or '.join(BINARIES)}; Debian: apt-get install -y chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{why}: CI must open the dashboard in a browser (.ci/run installs it)")
        pytest.skip(why)
    return exe


@contextlib.contextmanager
def launch() -> Iterator[Browser]:
    """The system Chromium, headless, through playwright; fails the test when it does not start."""
    exe = require_chromium()
    with sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=exe, headless=True, args=list(ARGS))
        except PlaywrightError as e:
            pytest.fail(f"{exe} did not start: {e}")
        try:
            yield browser
        finally:
            browser.close()


def open_page(page: Page, url: str, *, min_charts: int = 1, timeout: float = 60.0) -> list[dict]:
    """Load ``url``, wait until ``min_charts`` Plotly charts are drawn; return ``charts(page)``."""
    page.goto(url, timeout=timeout * 1000)
    page.wait_for_function(READY_JS, arg=min_charts, polling=500, timeout=timeout * 1000)
    _settle(page)
    return charts(page)


def _settle(page: Page, timeout: float = 10.0) -> None:
    """Wait until the page height stops changing (tables and expanders render last)."""
    last, deadline = -1, time.monotonic() + timeout
    while time.monotonic() < deadline:
        page.wait_for_timeout(700)
        height = page.evaluate(MAIN_HEIGHT_JS)
        if height == last:
            return
        last = height


def charts(page: Page) -> list[dict]:
    return page.evaluate(CHARTS_JS)


def text(page: Page) -> str:
    return page.inner_text("body")


def screenshot(page: Page, path: Path) -> Path:
    """A PNG of Streamlit's whole main area (the viewport grown to its height, then restored)."""
    size = page.viewport_size
    height = max(size["height"], int(page.evaluate(MAIN_HEIGHT_JS) or 0))
    page.set_viewport_size({"width": size["width"], "height": height})
    page.wait_for_timeout(500)
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=path)
    page.set_viewport_size(size)
    return path
