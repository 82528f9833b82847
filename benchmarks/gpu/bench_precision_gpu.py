"""The invariant suite and the bug set on CUDA: real flash/efficient sdpa kernels, and float32 with TF32 on.

    PYTHONPATH=. python benchmarks/gpu/bench_precision_gpu.py [--dtypes bf16,fp16,fp32,tf32] [--widths 256,1024]
                                                              [--methods files,measured,replay,live]

The same cases and methods as ``benchmarks/bench_precision.py`` (``tests/models/invariant_suite.py``), with
both models on the GPU: the sdpa port takes torch's flash or memory-efficient kernel where it applies, and
"tf32" runs float32 with ``torch.backends.cuda.matmul.allow_tf32 = True`` (what many GPU users set) for both
sides. Replay and both-live comparisons run the float64 truths on the GPU (TF32 off, math attention, restored).
Prints a table and the counts; without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="bf16,fp16,fp32,tf32")
    parser.add_argument("--widths", default="256,1024")
    parser.add_argument("--methods", default="files,measured,replay,live")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to run (the CPU suite is benchmarks/bench_precision.py)")
        return 0
    from tests.models import invariant_ports as ip
    from tests.models.invariant_suite import run_case

    cases = list(ip.VARIANTS) + [f"sdpa+{bug}" for bug in ip.BUGS]
    methods = args.methods.split(",")
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print("| dtype | width | case | " + " | ".join(methods) + " |")
    counts: dict[str, int] = defaultdict(int)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.dtypes.split(","):
            dtype, tf32 = ("fp32", True) if name == "tf32" else (name, False)
            before = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = tf32
            try:
                for width in map(int, args.widths.split(",")):
                    for case in cases:
                        variant, _, bug = case.partition("+")
                        cells = []
                        for method in methods:
                            o = run_case(Path(tmp), dtype, variant, bug or None, method, width=width, device="cuda")
                            counts[o.grade] += 1
                            cells.append(f"{o.grade} ({o.ratio:.2g})" + ("" if o.grade in ("ok", "miss", "unresolved")
                                                                        else f" {o.named}"))
                        print(f"| {name} | {width} | {case} | " + " | ".join(cells) + " |", flush=True)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = before
    print(dict(counts))
    return 1 if counts["FALSE ALARM"] or counts["WRONG"] else 0


if __name__ == "__main__":
    sys.exit(main())
