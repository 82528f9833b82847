"""Every Python and shell block of README.md and docs/ runs, in page order, and prints what the page shows.

Each page runs in its own process and fresh working folder (tests/docs_harness); a page declares its hidden
set-up, its skips (with a reason) and its expected output in HTML comments (docs/architecture.md, "Tests").
New pages are picked up by the glob: nothing to register. Pages run side by side, one per core.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.docs_harness.check import page_failures, run_page
from tests.docs_harness.expect import explain, matches
from tests.docs_harness.pages import parse_page

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every page that has something to run, started at once; each test waits for its own page."""
    pool = ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1)))
    started = {}
    for path in PAGES:
        page = parse_page(path)
        if page.runs and not page.problems:
            folder = tmp_path_factory.mktemp(path.stem) / "work"
            folder.mkdir()
            started[path] = (page, pool.submit(run_page, page, folder))
    yield started
    pool.shutdown(cancel_futures=True)


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_page_runs_as_written(path, runs):
    page = parse_page(path)
    assert not page.problems, "\n".join(page.problems)
    if path not in runs:
        return  # a page of prose and data, no block to run: its markup is all there is to check
    page, results = runs[path]
    failures = page_failures(page, results.result())
    assert not failures, "\n\n".join(failures)


def test_the_readme_port_recipe_runs_alone_as_pasted(tmp_path):
    """Pasted into a file on its own, in an empty folder, with plain python: it prints what the README shows."""
    readme = parse_page(REPO / "README.md")
    heading = (REPO / "README.md").read_text().splitlines().index("## Where does my port differ?") + 1
    recipe = next(step for step in readme.steps if step.kind == "python" and step.line > heading)
    assert recipe.expected is not None, "the recipe shows what it prints"
    (tmp_path / "recipe.py").write_text(recipe.code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "recipe.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert matches(recipe.expected, done.stdout), explain(recipe.expected, done.stdout)
