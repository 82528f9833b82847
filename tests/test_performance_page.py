"""docs/performance.md shows what benchmarks/bench_trace.py prints, and the README quotes that page.

The page holds one run's output verbatim between two comments (it is Markdown already). This test cannot
re-run the benchmark (minutes, and timings are the machine's), so it re-prints the page's own medians with
the benchmark's functions (``report`` per case, ``summary`` when the benchmark has one) and requires the
same text: the same headings, labels, rows and lines, and every number within the rounding of the medians
the page shows. When the benchmark's output changes, this fails until the page holds a fresh run.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "performance.md"
BEGIN = "<!-- benchmark output: python benchmarks/bench_trace.py -->"
END = "<!-- end of benchmark output -->"
NUMBER = re.compile(r"\d+(?:\.\d+)?")
HEADER = re.compile(r"torch \S+, \d+ threads, \d+ cpus, (?P<rounds>\d+) rounds(?:, (?P<clock>\w+) clock)?")
ROW = re.compile(r"^\| (?P<label>[^|]+?) \| (?P<ms>[\d.]+) \| (?P<ratio>[\d.]+) \|$")
FRESH = "paste the output of a fresh `python benchmarks/bench_trace.py` run between the comments"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_trace", REPO / "benchmarks" / "bench_trace.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def printed_run(text: str) -> tuple[int, str | None, dict[str, str]]:
    """The page's benchmark output: rounds, the clock (when the header names one), and each section's text
    by name (``### name: ...``)."""
    assert BEGIN in text and END in text, f"docs/performance.md lost its markers; {FRESH}"
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")
    first, _, rest = block.partition("\n")
    header = HEADER.fullmatch(first.strip())
    assert header, f"the first line is not the benchmark's header: {first!r}; {FRESH}"
    sections = {}
    for part in re.split(r"^(?=### )", rest.strip("\n"), flags=re.M):
        if part.strip():
            name = part.split(":", 1)[0].removeprefix("### ").strip()
            sections[name] = part.strip("\n")
    return int(header["rounds"]), header["clock"], sections


def medians_of(section: str) -> dict[str, float]:
    rows = [ROW.match(line.strip()) for line in section.splitlines()]
    return {row["label"]: float(row["ms"]) / 1000 for row in rows if row}


def assert_printed_alike(page: str, printed: str, what: str) -> None:
    """Same text once numbers are masked; the numbers equal within the rounding of the page's medians."""
    assert NUMBER.sub("N", page) == NUMBER.sub("N", printed), (
        f"{what} on the page is not what the benchmark prints; {FRESH}\n--- page\n{page}\n--- benchmark\n{printed}"
    )
    for shown, again in zip(NUMBER.findall(page), NUMBER.findall(printed)):
        a, b = float(shown), float(again)
        assert abs(a - b) <= max(0.011, 0.02 * abs(b)), f"{what}: the page shows {shown}, its medians give {again}"


def test_the_page_holds_a_run_of_the_benchmark(bench):
    rounds, clock, sections = printed_run(PAGE.read_text())
    cases = {name: text for name, text in sections.items() if name != "summary"}
    assert cases, f"no case tables on the page; {FRESH}"
    results = {}
    for name, text in cases.items():
        results[name] = medians_of(text)
        assert_printed_alike(text, bench.report(name, results[name]), f"case {name!r}")
    if hasattr(bench, "summary"):
        assert "summary" in sections, f"the benchmark prints a summary table, the page has none; {FRESH}"
        printed = bench.summary(results, rounds, clock) if clock else bench.summary(results, rounds)
        assert_printed_alike(sections["summary"], printed, "the summary")


def test_the_readme_quotes_the_page(bench):
    _, _, sections = printed_run(PAGE.read_text())
    small = medians_of(sections["small"])
    section = (REPO / "README.md").read_text().split("## Fast enough to leave on", 1)[1].split("\n## ", 1)[0]
    quoted = [float(x) for x in re.findall(r"\*\*([\d.]+)×\*\*", section)]
    plain = small["plain"]
    alone = small["safetensors alone (pruned files)"]
    page = [
        small["nbtrace repr pruned"] / plain,
        small["transformers repr pruned"] / plain,
        (small["nbtrace safetensors pruned"] - plain) / alone,
    ]
    cpu, gpu = quoted[:3], quoted[3:]
    assert len(cpu) == 3 and all(abs(q - x) <= 0.06 for q, x in zip(cpu, page)), (
        f"README's 'Fast enough to leave on' quotes {cpu}; docs/performance.md's small case gives "
        f"{[round(x, 1) for x in page]} (nbtrace repr pruned, transformers repr pruned, safetensors: plain + x × alone)"
    )
    # the GPU figures: the 1.3B row of the H100 table (repr pruned, transformers repr pruned)
    row = next(line for line in PAGE.read_text().splitlines() if line.startswith("| 16 layers x 2048"))
    cells = [float(c.strip().rstrip("x")) for c in row.strip("|").split("|")[2:]]
    assert len(gpu) == 2 and abs(gpu[0] - cells[0]) <= 0.06 and abs(gpu[1] - cells[4]) <= 0.5, (gpu, cells)
