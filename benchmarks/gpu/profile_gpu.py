"""Where a traced forward's time goes on a GPU: host time against device time, and the host's profile.

    python benchmarks/gpu/profile_gpu.py [--size 1] [--top 30]

For the plain forward and nbtrace's repr pruned / unpruned traces of bench_gpu.py's Llama (``--size`` indexes
``bench_gpu.SIZES``), prints the median wall time, the time the host spends inside the call (the forward
returns before the GPU is done: when host time is close to the wall time, the host is the bottleneck), and a
cProfile of one traced forward (top functions by their own time). Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import NEEDS_GPU, SIZES, build


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(NEEDS_GPU)
        return 0
    import nbtrace

    size = SIZES[args.size]
    model, inputs = build(size, "cuda", torch.bfloat16)
    scratch = Path(tempfile.mkdtemp(prefix="nbtrace-profile-gpu-"))
    count = [0]

    def plain() -> None:
        with torch.no_grad():
            model(**inputs)

    def traced(prune: bool) -> None:
        count[0] += 1
        with nbtrace.model_addition_debugger_context(model, debug_path=str(scratch / str(count[0])),
                                                     do_prune_layers=prune):
            model(**inputs)

    modes = {"plain": plain, "repr pruned": lambda: traced(True), "repr unpruned": lambda: traced(False)}
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {size.label()}, bf16")
    for label, go in modes.items():
        go()
        torch.cuda.synchronize()
        walls, hosts = [], []
        for _ in range(args.rounds):
            torch.cuda.synchronize()
            begin = time.perf_counter()
            go()
            host = time.perf_counter() - begin
            torch.cuda.synchronize()
            walls.append(time.perf_counter() - begin)
            hosts.append(host)
        print(f"{label}: wall {statistics.median(walls) * 1e3:.1f} ms, host inside the call "
              f"{statistics.median(hosts) * 1e3:.1f} ms", flush=True)
    for label in ("repr pruned", "repr unpruned"):
        profile = cProfile.Profile()
        profile.enable()
        modes[label]()
        torch.cuda.synchronize()
        profile.disable()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(args.top)
        print(f"\n== cProfile of one traced forward, {label} ==")
        print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[:12000], flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
