"""Headless Chromium over the DevTools protocol: load a dashboard page, wait until its Plotly
charts hold data, read the charts from the DOM and save a screenshot.

Used by the browser test and to regenerate ``docs/dashboard/*.png``. Waiting on a DOM condition
(instead of ``--virtual-time-budget``) avoids capturing Streamlit's loading placeholder. Needs the
Debian ``chromium`` package and ``websockets`` (a Streamlit dependency).
Simplification: one tab, synchronous calls, no event subscriptions.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from websockets.sync.client import connect

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
)

CHARTS_JS = """JSON.stringify([...document.querySelectorAll('.js-plotly-plot')].map(gd => ({
  title: (gd.layout && gd.layout.title && gd.layout.title.text) || '',
  traces: (gd.data || []).length,
  points: (gd.calcdata || []).map(cd => cd.length).reduce((a, b) => a + b, 0),
  paths: gd.querySelectorAll('.scatterlayer path.js-line, .scatterlayer path.js-fill,'
                             + ' .barlayer path, .heatmaplayer image').length,
})))"""
"""Every Plotly chart on the page: title, trace count, computed points (``gd.calcdata``) and
drawn SVG paths."""

READY_JS = """(() => { const t = document.querySelector('h1');
  const plots = [...document.querySelectorAll('.js-plotly-plot')];
  const busy = document.querySelector('[data-testid="stStatusWidget"]');
  return !!t && plots.length >= %d && plots.every(p => p.querySelector('.main-svg')) && !busy; })()"""


MAIN_JS = "document.querySelector('[data-testid=\"stMain\"]') || document.body"
"""The element that scrolls Streamlit's main area."""


class Chromium:
    """A headless Chromium with one tab, driven over the DevTools websocket."""

    def __init__(self, *, width: int = 1280, height: int = 900, binary: str = "chromium") -> None:
        exe = shutil.which(binary)
        if exe is None:
            raise FileNotFoundError(f"{binary} not found (Debian: apt-get install -y chromium)")
        self._profile = tempfile.mkdtemp(prefix="cl-chromium-")
        self.size = (width, height)
        self._proc = subprocess.Popen(
            [
                exe,
                *FLAGS,
                f"--user-data-dir={self._profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port = self._devtools_port(timeout=30.0)
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=10))
        page = next(t for t in targets if t.get("type") == "page")
        self._stack = contextlib.ExitStack()
        self._ws = self._stack.enter_context(
            connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
        )
        self._ids = itertools.count(1)
        self.call("Page.enable")
        self.call("Runtime.enable")

    def _devtools_port(self, timeout: float) -> int:
        marker = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"chromium exited with code {self._proc.returncode}")
            if marker.is_file() and marker.read_text().strip():
                return int(marker.read_text().split()[0])
            time.sleep(0.1)
        raise TimeoutError("chromium did not open its DevTools port")

    def call(self, method: str, **params) -> dict:
        """Send one DevTools command and return its result (events in between are skipped)."""
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self._ws.recv(timeout=60))
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def open(self, url: str, *, min_charts: int = 1, timeout: float = 60.0) -> list[dict]:
        """Load ``url``, wait until ``min_charts`` Plotly charts are drawn; return ``charts()``."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if self.evaluate(READY_JS % min_charts):
                self._settle()
                return self.charts()
        raise TimeoutError(f"{url}: fewer than {min_charts} charts rendered in {timeout:.0f} s")

    def _settle(self, timeout: float = 10.0) -> None:
        """Wait until the page height stops changing (tables and expanders render last)."""
        last, deadline = -1, time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(0.7)
            height = self.evaluate(f"({MAIN_JS}).scrollHeight")
            if height == last:
                return
            last = height

    def charts(self) -> list[dict]:
        return json.loads(self.evaluate(CHARTS_JS) or "[]")

    def text(self) -> str:
        return self.evaluate("document.body.innerText") or ""

    def screenshot(self, path: str | Path, *, full_page: bool = True) -> Path:
        """Save a PNG of the page (the whole scrollable page when ``full_page``)."""
        width, height = self.size
        if full_page:
            height = max(height, int(self.evaluate(f"({MAIN_JS}).scrollHeight") or height))
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        time.sleep(0.5)
        data = self.call("Page.captureScreenshot", format="png")["data"]
        self.call("Emulation.clearDeviceMetricsOverride")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self._stack.close()
        finally:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def wait_healthy(base_url: str, *, timeout: float = 60.0) -> None:
    """Wait for Streamlit's ``/_stcore/health`` to answer ``ok``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base_url}/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{base_url} not healthy after {timeout:.0f} s")


def save_page_screenshots(base_url: str, out_dir: str | Path, *, width: int = 1200) -> list[Path]:
    """One PNG per dashboard page (``<url_path or overview>.png``), palette-reduced to stay small."""
    from dashboards import PAGES, url_path

    out = []
    with Chromium(width=width, height=800) as browser:
        for title, page in PAGES:
            name = url_path(page) or "Overview"
            browser.open(f"{base_url}/{url_path(page)}", min_charts=1, timeout=180)
            path = browser.screenshot(Path(out_dir) / f"{name.lower()}.png")
            _shrink(path)
            out.append(path)
            print(f"{title}: {path} ({path.stat().st_size // 1024} KiB)")
    return out


def _shrink(path: Path) -> None:
    """Re-save as a 64-colour palette PNG (Pillow ships with Streamlit)."""
    from PIL import Image

    with Image.open(path) as img:
        small = img.convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)


if __name__ == "__main__":  # python -m dashboards.browser http://127.0.0.1:8501 docs/dashboard
    import sys

    save_page_screenshots(sys.argv[1], sys.argv[2])
