"""How big a saved HTML file is and how fast it opens: ``save_html`` on a 20,000-call trace.

    PYTHONPATH=. python benchmarks/bench_html.py [--rounds 3] [--chromium /usr/bin/chromium]

The trace is ``synthetic_trace()`` of tests/models/widget_models.py (a SUMMARY trace of 20,004 calls
shaped like a 400-layer mixture-of-experts decoder). It prints the seconds ``save_html`` takes, the
file's size, and, in headless Chromium opening the file from disk, the seconds until the first rows
are on screen and until the first selected call's details are shown (their first use inflates them).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nbtrace
from tests.models.widget_models import synthetic_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    trace = synthetic_trace(nan_layer=321)
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        saves, firsts, details = [], [], []
        for _ in range(args.rounds):
            started = time.perf_counter()
            file = nbtrace.save_html(trace, Path(folder) / "big.html")
            saves.append(time.perf_counter() - started)
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            started = time.perf_counter()
            page.goto(file.as_uri())
            page.locator(".nbt-rows .nbt-row").first.wait_for()
            firsts.append(time.perf_counter() - started)
            started = time.perf_counter()
            page.locator(".nbt-rows .nbt-row").nth(2).click()
            page.locator(".nbt-detail .nbt-d-meta").wait_for()
            details.append(time.perf_counter() - started)
            page.close()
        browser.close()
        print(f"{len(trace):,} calls, {file.stat().st_size / 2**20:.2f} MiB file")
        for name, values in (("save_html", saves), ("first rows", firsts), ("first details", details)):
            print(f"{name:>14}: median {statistics.median(values):.2f} s  ({', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
