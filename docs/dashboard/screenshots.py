"""Regenerate the dashboard screenshots of ``docs/dashboard.md``: one PNG per page.

    closedloop dashboard runs &      # the runs to show, served on 127.0.0.1:8501
    python docs/dashboard/screenshots.py http://127.0.0.1:8501 docs/dashboard

Drives the system Chromium (Debian package ``chromium``) through playwright (``closedloop[dev]``);
playwright downloads no browser of its own. Each page is captured once its Plotly charts are drawn
and its height has stopped changing, at the full height of Streamlit's main area, then re-saved as
a 64-colour palette PNG to stay small. A page that draws no chart within ``--timeout`` (nothing
to show for the runs served, e.g. Agents without an async run) is skipped and named; ``--pages``
captures only the pages named.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from PIL import Image  # Pillow ships with Streamlit
from playwright.sync_api import Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from dashboards import PAGES, url_path

READY_JS = """() => { const plots = [...document.querySelectorAll('.js-plotly-plot')];
  return !!document.querySelector('h1') && plots.length > 0
    && plots.every(p => p.querySelector('.main-svg'))
    && !document.querySelector('[data-testid="stStatusWidget"]'); }"""
MAIN_HEIGHT_JS = """() => (document.querySelector('[data-testid="stMain"]') || document.body)
  .scrollHeight"""


def capture(page: Page, url: str, path: Path, *, timeout_s: float = 180.0) -> Path:
    """Load ``url``, wait for its charts and a stable height, save the whole main area."""
    page.set_viewport_size({"width": page.viewport_size["width"], "height": 800})
    page.goto(url, timeout=timeout_s * 1000)
    page.wait_for_function(READY_JS, polling=500, timeout=timeout_s * 1000)
    last, deadline = -1, time.monotonic() + 10
    while time.monotonic() < deadline:  # tables and expanders render last
        page.wait_for_timeout(700)
        height = page.evaluate(MAIN_HEIGHT_JS)
        if height == last:
            break
        last = height
    page.set_viewport_size({"width": page.viewport_size["width"], "height": max(800, last)})
    page.wait_for_timeout(500)
    page.screenshot(path=path)
    with Image.open(path) as img:
        small = img.convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the running dashboard, e.g. http://127.0.0.1:8501")
    parser.add_argument("out", type=Path, help="folder for the PNGs (docs/dashboard)")
    parser.add_argument("--width", type=int, default=1200)
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per page")
    parser.add_argument("--pages", nargs="+", metavar="TITLE", help="page titles, e.g. Mismatch")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args()
    titles = [t for t, _ in PAGES]
    unknown = sorted(set(args.pages or ()) - set(titles))
    if unknown:
        parser.error(f"unknown pages {unknown}; pages: {titles}")
    args.out.mkdir(parents=True, exist_ok=True)
    skipped = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": args.width, "height": 800})
        for title, page_file in PAGES:
            if args.pages and title not in args.pages:
                continue
            url, name = f"{args.url}/{url_path(page_file)}", (url_path(page_file) or "Overview")
            try:
                path = capture(page, url, args.out / f"{name.lower()}.png", timeout_s=args.timeout)
            except PlaywrightTimeout:
                skipped.append(title)
                print(f"{title}: no chart drawn in {args.timeout:.0f} s, skipped")
                continue
            print(f"{title}: {path} ({path.stat().st_size // 1024} KiB)")
        browser.close()
    if skipped:
        raise SystemExit(f"skipped (no chart): {', '.join(skipped)}")


if __name__ == "__main__":
    main()
