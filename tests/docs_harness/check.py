"""Run a parsed page in a fresh process and folder, and say everything that does not hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.docs_harness.expect import explain, matches
from tests.docs_harness.pages import Page

REPO = Path(__file__).resolve().parents[2]
PAGE_TIMEOUT = 300


def run_page(page: Page, folder: Path) -> list[dict]:
    """Each step's result (``output``, ``error``, ``checks``), up to the first that failed."""
    plan = folder.parent / f"{folder.name}.steps.json"
    results = folder.parent / f"{folder.name}.results.json"
    plan.write_text(json.dumps([step.to_json() for step in page.steps]))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env["MPLBACKEND"] = "Agg"
    env["IPYTHONDIR"] = str(folder.parent / "ipython")  # the page's own IPython profile and history
    done = subprocess.run(
        [sys.executable, "-m", "tests.docs_harness.runner", str(plan), str(results)],
        cwd=folder, env=env, capture_output=True, text=True, timeout=PAGE_TIMEOUT,
    )
    if not results.exists():
        raise AssertionError(f"the runner itself failed on {page.path.name}:\n{done.stdout}\n{done.stderr}")
    return json.loads(results.read_text())


def page_failures(page: Page, results: list[dict]) -> list[str]:
    """What a reader of the page would trip over: a block that raised or exited wrongly, output that differs."""
    name = page.path.name
    failures = []
    for step, result in zip(page.steps, results):
        where = f"{name}:{step.line}"
        if result["error"]:
            failures.append(f"{where}: the {step.kind} block failed:\n{result['error']}")
            continue
        for check in result.get("checks", []):
            if not check["ok"]:
                failures.append(
                    f"{where}: line {check['line']} of the block is {check['actual']}, "
                    f"the page says {check['expected']}"
                )
        if step.expected is not None and not matches(step.expected, result["output"]):
            failures.append(
                f"{where}: the output differs from the page's (line {step.expected_line}):\n"
                + explain(step.expected, result["output"])
            )
    if len(results) < len(page.steps) and not failures:
        failures.append(f"{name}: only {len(results)} of {len(page.steps)} steps ran")
    return failures
