"""How long narrowing one call takes: a Llama decoder layer (transformers) against the port's block, bf16.

    PYTHONPATH=. python benchmarks/bench_narrow.py [--rounds 5] [--threads 1] [--dtype bfloat16]

Each round runs ``nbtrace.narrow(layer, block, args, kwargs, port_args=..., dtype=...)``: both modules
re-run under the recording mode, every operation also run in float64 (along the float64 path and on its own
inputs), the two records aligned by value and the first diverging operation named. It prints the median
and the fastest round in seconds, for a correct port and for the rotary bug, and the number of operations
recorded on each side. One thread by default: tiny tensors, where threads only contend on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nbtrace
from tests.models.layer_cases import layer_pair


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="bfloat16")
    options = parser.parse_args()
    torch.set_num_threads(options.threads)
    dtype = getattr(torch, options.dtype)
    for bugs in ((), ("rotary_k",)):
        ref, port, args, kwargs, port_args = layer_pair(bugs, dtype=dtype)
        times, diff = [], None
        for _ in range(options.rounds + 1):  # the first round warms up
            start = time.perf_counter()
            diff = nbtrace.narrow(ref, port, args, kwargs, port_args=port_args, dtype=dtype)
            times.append(time.perf_counter() - start)
        times = times[1:]
        name = "+".join(bugs) or "correct"
        print(f"{name:>9} ({options.dtype}, {options.threads} thread): median {statistics.median(times):.3f} s, "
              f"fastest {min(times):.3f} s; {len(diff.reference)} reference and {len(diff.port)} port operations")
        print(f"           {diff}")


if __name__ == "__main__":
    main()
