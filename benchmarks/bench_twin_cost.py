"""What the float64 twin costs, side by side with the twinless trace, in one run: the goals of issue 37.

Three cases, each traced with ``nbtrace.trace``'s defaults but the twin (``measure_rounding="twin"``, what
``"auto"`` records where it fits) and without it (``measure_rounding=False``), with the plain forward beside them:

- ``llama float32`` and ``llama bfloat16``: transformers' ``LlamaForCausalLM`` as ``bench_measure_rounding.py``
  builds it (4 layers, hidden 256, eager attention, 128 tokens), ``use_repr=False``, not pruned, under
  ``torch.no_grad()``; goals: the twin at most 2.5x the twinless trace in float32, 1.5x in bfloat16;
- ``llama float32 from bfloat16``: the float32 Llama with weights that hold bfloat16 values (a checkpoint published
  in bfloat16, loaded in float32), where the twin makes no bfloat16-rounded run (``capture/twin/exact.py``); goal as
  float32;
- ``demo 20k calls``: the demo model (``nbtrace.demo``, hidden 64, 16 tokens) with 1,540 layers, 20,025 calls per
  forward, the same options; goal: at most 2x its twinless trace.

Rounds are interleaved (each variant once per round, shuffled); medians. ``--clock cpu`` times the process's CPU
(steadier on a shared machine; torch on one thread then counts as wall time would).

    PYTHONPATH=. python benchmarks/bench_twin_cost.py --threads 1 --clock cpu
    PYTHONPATH=. python benchmarks/bench_twin_cost.py --cases llama-float32 --rounds 5
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from interleaved import interleaved_medians  # noqa: E402  (beside this script)

#: case -> (the goal: twin / twinless at most, default rounds)
CASES = {"llama-float32": (2.5, 5), "llama-bfloat16": (1.5, 5), "llama-float32-from-bfloat16": (2.5, 5),
         "demo-20k": (2.0, 1)}


def build(case: str, layers: int) -> tuple[torch.nn.Module, Callable[[torch.nn.Module], Any]]:
    """The model of ``case`` and how to call it."""
    if case.startswith("llama"):
        from bench_measure_rounding import build as build_llama

        model, ids = build_llama(getattr(torch, case.split("-")[1]))
        if case.endswith("from-bfloat16"):  # a checkpoint published in bfloat16, loaded in float32: no rounded run
            with torch.no_grad():
                for tensor in model.state_dict().values():
                    tensor.copy_(tensor.to(torch.bfloat16).to(tensor.dtype))
        return model, lambda m: m(ids, use_cache=False)
    from nbtrace.demo import build_demo

    model, inputs = build_demo(num_layers=layers, seq_len=16)
    return model, lambda m: m(**inputs)


def measure(case: str, rounds: int, layers: int, clock: Callable[[], float], scratch: Path) -> dict[str, float]:
    """Median seconds of the plain forward, the twinless trace and the trace with the twin."""
    import nbtrace

    model, call = build(case, layers)

    def run(name: str) -> float:
        folder = scratch / name
        start = clock()
        with torch.no_grad():
            if name == "plain":
                call(model)
            else:
                with nbtrace.trace(model, folder, do_prune_layers=False, use_repr=False,
                                   measure_rounding="twin" if name == "twin" else False):
                    call(model)
        elapsed = clock() - start
        shutil.rmtree(folder, ignore_errors=True)
        return elapsed

    return interleaved_medians(run, ("plain", "off", "twin"), rounds)


def row(case: str, found: dict[str, float]) -> str:
    """One line of the table."""
    goal = CASES[case][0]
    ratio = found["twin"] / found["off"]
    return (f"| {case} | {found['plain'] * 1e3:.0f} | {found['off'] * 1e3:.0f} | {found['twin'] * 1e3:.0f} | "
            f"{ratio:.2f} | {goal:g} | {'yes' if ratio <= goal else 'no'} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--rounds", type=int, default=None, help="rounds per case (default: 5, the 20k case 1)")
    parser.add_argument("--layers", type=int, default=1540, help="layers of the demo model")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.clock} clock, medians of "
          f"interleaved rounds\n")
    print("| case | plain ms | traced, twin off ms | traced, twin ms | × twin off | goal | met |")
    print("|---|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for case in args.cases.split(","):
            rounds = args.rounds or CASES[case][1]
            print(row(case, measure(case, rounds, args.layers, clock, Path(scratch))), flush=True)


if __name__ == "__main__":
    main()
