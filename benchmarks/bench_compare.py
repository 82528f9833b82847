"""How long ``compare`` takes on two 20,000-call traces, and a replay.

    PYTHONPATH=. python benchmarks/bench_compare.py [--layers 1540] [--rounds 3] [--threads 1]

The demo model (``nbtrace.demo``, hidden 64, 16 tokens) with 1,540 layers makes 20,025 calls per
forward; both sides are traced with full tensors (``use_repr=False``), every layer kept, b with
one weight of layer 1155 scaled by 1.01. It prints the median seconds of:

- ``compare(a, b)``: the noise-aware verdict from the two trace files (loading both traces included);
- ``compare(a, b, rtol=1e-5, atol=1e-8)``: the per-element tolerance, the algorithm compare used before;
- ``compare(a, b)`` of the same two runs traced with printed values (``use_repr=True``, the default);
- ``compare(a, model)``: replay — the port traced on a's inputs, compared, and each of its 20,024
  aligned module calls run again on a's recorded inputs, in float32 and in float64 (one round);
- the same three for the precision case set's Llama (58 calls, bf16).
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
from nbtrace.demo import build_demo
from tests.models.precision import CASES, trace_case


def _demo(layers: int, scaled: bool):
    model, inputs = build_demo(num_layers=layers, seq_len=16)
    if scaled:
        with torch.no_grad():
            model.layers[layers * 3 // 4].mlp.up_proj.weight.mul_(1.01)
    return model, inputs


def _traced(model, inputs, folder: Path, use_repr: bool = False) -> Path:
    with torch.no_grad(), nbtrace.trace(model, debug_path=folder, use_repr=use_repr, do_prune_layers=False,
                                        measure_rounding=False):
        model(**inputs)
    return folder


def _median(rounds: int, run) -> tuple[float, object]:
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--layers", type=int, default=1540)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), median of {args.rounds} rounds (replay: 1)")
    with tempfile.TemporaryDirectory() as tmp:
        a_path = _traced(*_demo(args.layers, False), Path(tmp) / "a")
        port, inputs = _demo(args.layers, True)
        b_path = _traced(port, inputs, Path(tmp) / "b")
        calls = len(nbtrace.load_trace(a_path))
        files, c = _median(args.rounds, lambda: nbtrace.compare(a_path, b_path))
        print(f"demo, {calls} calls: compare(a, b) {files:.1f} s -> {c.first_divergence.module_path}")
        before, _ = _median(args.rounds, lambda: nbtrace.compare(a_path, b_path, rtol=1e-5, atol=1e-8))
        print(f"demo, {calls} calls: compare(a, b, rtol=, atol=) {before:.1f} s")
        printed_a = _traced(*_demo(args.layers, False), Path(tmp) / "printed_a", use_repr=True)
        printed_b = _traced(port, inputs, Path(tmp) / "printed_b", use_repr=True)
        printed, c = _median(args.rounds, lambda: nbtrace.compare(printed_a, printed_b))
        print(f"demo, {calls} calls, printed values: compare(a, b) {printed:.1f} s -> {c.first_divergence.module_path}")
        replay, c = _median(1, lambda: nbtrace.compare(a_path, port))
        print(f"demo, {calls} calls: compare(a, port) {replay:.1f} s, of which replaying "
              f"{len(c.replay.replayed)} calls {c.replay.seconds:.1f} s -> {c.first_divergence.module_path}")
        case = next(c for c in CASES if c.name == "attn_scale")
        _, port, a, b = trace_case(case, "bf16", Path(tmp) / "llama")
        files, _ = _median(args.rounds, lambda: nbtrace.compare(a, b))
        before, _ = _median(args.rounds, lambda: nbtrace.compare(a, b, rtol=1.6e-2, atol=1e-6))
        replay, c = _median(args.rounds, lambda: nbtrace.compare(a, port))
        print(f"Llama bf16, {len(a)} calls: compare(a, b) {files:.2f} s; with rtol= {before:.2f} s; "
              f"compare(a, port) {replay:.2f} s, of which replaying {len(c.replay.replayed)} calls "
              f"{c.replay.seconds:.2f} s")


if __name__ == "__main__":
    main()
