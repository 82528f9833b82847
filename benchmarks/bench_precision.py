"""The invariant suite, every case by every method: false alarms and misdirections counted.

    PYTHONPATH=. python benchmarks/bench_precision.py [--dtypes bf16,fp16,fp32] [--widths 256,1024]
                                                      [--seeds 0,1] [--methods files,measured,replay,live]
                                                      [--cases sdpa,flash,...,sdpa+gelu_tanh] [--out results.md]

Cases (``tests/models/invariant_ports.py``): transformers' Llama (2 layers, eager attention) against ports with
the same weights: correct variants (itself, run twice, sdpa, a flash-style attention, TF32 emulated, split-K,
fused q/k/v, fused gate/up) and, on the sdpa port, each bug of the set (an RMSNorm without its upcast is the same
function: not counted among the bugs). Methods (``tests/models/invariant_suite.py``, one per path a user takes):
``default`` (two folders traced with nbtrace.trace's defaults: printed values, pruned, the float64 twin), ``port``
(such a folder against the live port), ``files`` (two full-tensor folders, nothing measured), ``measured`` (both
traced with ``measure_rounding=True``), ``replay`` (a folder without the twin against the live port), ``live`` (both
modules live). Grades: ok, unresolved (files without measurements), FALSE ALARM (a module named, no bug), WRONG
(another module), miss (a bug not named: below the measured rounding, or a method that cannot see it). Prints a
table, then per method and dtype: false alarms, misdirections, bugs found; the largest ratio (difference / allowed)
over the correct variants; seconds per case. torch runs on one thread (small tensors: threads only contend).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.models import invariant_ports as ip  # noqa: E402
from tests.models.invariant_suite import METHODS, run_case  # noqa: E402

CORRECT = list(ip.VARIANTS)
BUGGY = [f"sdpa+{bug}" for bug in ip.BUGS]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="bf16,fp16,fp32")
    parser.add_argument("--widths", default="256")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--cases", default=",".join(CORRECT + BUGGY))
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    methods = args.methods.split(",")
    lines = ["| dtype | width | seed | case | " + " | ".join(methods) + " |", "|" + "---|" * (4 + len(methods))]
    counts: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    ratio, seconds = 0.0, defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in args.dtypes.split(","):
            for width in map(int, args.widths.split(",")):
                for seed in map(int, args.seeds.split(",")):
                    for case in args.cases.split(","):
                        variant, _, bug = case.partition("+")
                        cells = []
                        for method in methods:
                            o = run_case(Path(tmp), dtype, variant, bug or None, method, width=width, seed=seed)
                            counts[(method, dtype)][o.grade] += 1
                            semantic = bool(bug) and ip.BUGS[bug][1] is not None  # else: the same function
                            counts[(method, dtype)]["bugs"] += semantic
                            counts[(method, dtype)]["found"] += semantic and o.grade == "ok"
                            seconds[method].append(o.seconds)
                            if not bug:
                                ratio = max(ratio, o.ratio)
                            where = "" if o.grade in ("ok", "miss", "unresolved") else f" {o.named}"
                            cells.append(f"{o.grade} ({o.ratio:.2g}){where}")
                        line = f"| {dtype} | {width} | {seed} | {case} | " + " | ".join(cells) + " |"
                        print(line, flush=True)
                        lines.append(line)
    lines += ["", "| method | dtype | false alarms | wrong module | bugs named | bugs | unresolved |", "|---|---|---|---|---|---|---|"]
    for (method, dtype), c in sorted(counts.items()):
        lines.append(f"| {method} | {dtype} | {c['FALSE ALARM']} | {c['WRONG']} | {c['found']} | {c['bugs']} | "
                     f"{c['unresolved']} |")
    lines.append("")
    lines.append(f"largest ratio (difference / allowed) over the correct variants: {ratio:.3g}")
    for method, values in seconds.items():
        lines.append(f"{method}: {sum(values) / len(values):.2f} s per case (compare + replay, tracing excluded)")
    text = "\n".join(lines)
    print("\n".join(lines[lines.index("") :]))
    if args.out:
        Path(args.out).write_text(text + "\n")
    alarms = sum(c["FALSE ALARM"] + c["WRONG"] for c in counts.values())
    return 1 if alarms else 0


if __name__ == "__main__":
    sys.exit(main())
