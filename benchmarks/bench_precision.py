"""The precision case set, every case in every dtype: before (a per-element tolerance), from files, and with replay.

    PYTHONPATH=. python benchmarks/bench_precision.py [--dtypes bf16,fp16,fp32] [--cases clean,eps]
                                                      [--inputs padded,unpadded] [--out results.md]

Cases (``tests/models/precision.py``, ``tests/models/precision_ports.py``): transformers' Llama
(hidden 64, 4 layers) with eager attention as the reference; ports with sdpa attention, or written
from scratch with other names (fused q/k/v, fused gate/up), each with at most one injected bug.
For each case and dtype it prints what "before" (``compare(a, b, rtol=, atol=)`` with the dtype's
default tolerance: the algorithm compare used until the noise-aware verdict), the verdict from the
two trace files (``compare(a, b)``) and replay (``compare(a, port)``) name, graded: ok, FALSE ALARM
(a module named where there is no bug), WRONG (another module), miss (no module named where there is
a bug: the verdict says the difference is within what the dtype resolves). "pairs" says whether the
alignment paired the same calls as for the bug-free port of the same structure. Then the margins
(the largest score of any call in bug-free runs, the smallest at a named bug) and seconds per case.
torch runs on one thread (tiny tensors: threads only contend).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nbtrace
from nbtrace.diff.measure.metrics import TOLERANCE
from tests.models.precision import CASES, P, trace_case
from tests.models.precision_ports import RENAMED_CASES

NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def short(path: str | None) -> str:
    return "-" if path is None else path.replace(P + ".", "")


def grade(expected: str | None, got: str | None) -> str:
    if got == expected:
        return "ok"
    if expected is None:
        return "FALSE ALARM"
    return "miss" if got is None else "WRONG"


def answer(comparison) -> tuple[str | None, str, float, float]:
    """(module named, how sure and why, the largest score of any call, the score at the module named)."""
    first = comparison.first_divergence
    scores = [m.difference.score for m in comparison.matches if m.difference and m.difference.score is not None]
    peak = max(scores, default=0.0)
    if first is None:
        return None, "agree", peak, 0.0
    top = first.evidence[0] if first.evidence else None
    why = f"{first.confidence} {top.score:.3g}: {top.test}" if top else first.confidence
    if comparison.method == "files" and comparison.replay is not None:
        why += ", from files"
    return first.module_path, why, peak, top.score if top else 0.0


def evaluate(dtypes: list[str], names: set[str] | None, padded: bool, folder: Path) -> list[dict]:
    rows = []
    for dtype in dtypes:
        references: dict[int, tuple] = {}
        clean_pairs: dict[tuple, list] = {}
        for case in CASES + RENAMED_CASES:
            if names is not None and case.name not in names and not case.name.endswith("clean"):
                continue
            start = time.perf_counter()
            model, port, a, b = trace_case(case, dtype, folder / dtype / f"seed{case.seed}", padded,
                                           references.get(case.seed))
            references[case.seed] = (model, a)
            seconds = {"trace": time.perf_counter() - start}
            rtol, atol = TOLERANCE[NAMES[dtype]]
            start = time.perf_counter()
            before = nbtrace.compare(a, b, rtol=rtol, atol=atol)
            seconds["before"] = time.perf_counter() - start
            start = time.perf_counter()
            files = nbtrace.compare(a, b)
            seconds["files"] = time.perf_counter() - start
            start = time.perf_counter()
            replay = nbtrace.compare(a, port)
            seconds["replay (traces the port too)"] = time.perf_counter() - start
            pairs = [(x.module_path, y.module_path) for x, y in files.alignment.pairs]
            stable = clean_pairs.setdefault((case.build_port, case.seed), pairs) == pairs
            if names is None or case.name in names:
                rows.append({"case": case.name, "dtype": dtype, "expected": case.expected(dtype),
                             "before": answer(before), "files": answer(files), "replay": answer(replay),
                             "stable": stable, "seconds": seconds})
            print(f"  {case.name} {dtype} done", file=sys.stderr)
    return rows


def table(rows: list[dict]) -> str:
    head = ["case", "dtype", "born in", "before (tolerance)", "files", "replay", "pairs"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["case"], r["dtype"], short(r["expected"])]
        for method in ("before", "files", "replay"):
            got, why, _, _ = r[method]
            cells.append(f"{short(got)} ({why}) {grade(r['expected'], got)}")
        cells.append("same" if r["stable"] else "CHANGED")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    out = []
    for method in ("before", "files", "replay"):
        grades = [grade(r["expected"], r[method][0]) for r in rows]
        counts = ", ".join(f"{g}: {grades.count(g)}" for g in sorted(set(grades)))
        out.append(f"{method:7s} {counts} (of {len(rows)})")
    for method in ("files", "replay"):
        clean = [r[method][2] for r in rows if r["expected"] is None]
        found = [r[method][3] for r in rows if r["expected"] is not None and r[method][0] == r["expected"]]
        if clean and found:
            out.append(f"{method}: largest score of any call without a bug {max(clean):.2f} (flag at 1); at a named "
                       f"bug: smallest {min(found):.3g}, median {statistics.median(found):.3g}")
    keys = rows[0]["seconds"].keys() if rows else []
    timing = "; ".join(f"{k} {statistics.median(r['seconds'][k] for r in rows):.2f}" for k in keys)
    return "\n".join(out) + f"\nmedian seconds per case: {timing}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dtypes", default="bf16,fp16,fp32")
    parser.add_argument("--cases", default=None, help="comma-separated case names (the clean ports always run)")
    parser.add_argument("--inputs", default="padded,unpadded", help="padded (left padding in 2 of 4 rows), unpadded")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = set(args.cases.split(",")) if args.cases else None
    parts = [f"torch {torch.__version__}, 1 thread"]
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.inputs.split(","):
            rows = evaluate(args.dtypes.split(","), names, kind == "padded", Path(tmp) / kind)
            parts.append(f"### inputs: {kind}\n\n{table(rows)}\n\n{summary(rows)}")
    text = "\n\n".join(parts)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
