"""Tracing ``generate``: memory over a long run, and what each step costs.

Every measurement runs in a fresh process with one torch thread, on transformers' Llama built from
a small config (``tests/models/generation.py``; nothing is downloaded), greedy, with the KV cache.

- memory: the Python heap still held after the traced block (``tracemalloc``; the Recorder alive,
  as in a notebook), then after reading every step back through ``rec.traces``, and the peak
  resident memory beyond an untraced ``generate`` (``VmHWM`` reset before the traced run);
- time: the wall time of each forward of a traced and of an untraced ``generate``, and of one traced
  forward alone; the cost tracing adds to a step early in the run and late in it.

    python benchmarks/bench_generate.py [--steps 101] [--layers 3] [--hidden 64]

Run it with ``PYTHONPATH`` pointing at another checkout to measure that one (the "before" column).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _model(args: argparse.Namespace):
    import torch

    sys.path.insert(0, str(REPO))
    from tests.models.generation import build_reference, make_prompt

    torch.set_num_threads(1)
    return build_reference(layers=args.layers, hidden=args.hidden), make_prompt()


def memory(args: argparse.Namespace) -> dict[str, float]:
    import torch

    import nbtrace

    model, prompt = _model(args)
    with torch.no_grad():
        model.generate(prompt, max_new_tokens=args.steps, do_sample=False)
    gc.collect()
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        if args.heap:
            tracemalloc.start()
        else:
            Path("/proc/self/clear_refs").write_text("5")  # reset the peak
            out["baseline_mb"] = _status_kb("VmRSS") / 1e3
        options = {"use_repr": not args.safetensors, "do_prune_layers": False, "measure_rounding": False}
        with nbtrace.trace(model, debug_path=folder, **options) as rec, torch.no_grad():
            model.generate(prompt, max_new_tokens=args.steps, do_sample=False)
        gc.collect()
        if args.heap:
            out["kept_mb"] = tracemalloc.get_traced_memory()[0] / 1e6
            for trace in rec.traces:  # every step read, one at a time
                len(trace)
            gc.collect()
            out["kept_after_reading_mb"] = tracemalloc.get_traced_memory()[0] / 1e6
            tracemalloc.stop()
        else:
            out["peak_extra_mb"] = _status_kb("VmHWM") / 1e3 - out["baseline_mb"]
        out["forwards"] = len(rec)
    return out


def timing(args: argparse.Namespace) -> dict[str, float]:
    """Per-forward wall times (ms): untraced generate, traced generate, and one traced forward alone."""
    import torch

    import nbtrace

    model, prompt = _model(args)
    stamps: list[float] = []
    hook = model.register_forward_pre_hook(lambda *_: stamps.append(time.perf_counter()))

    def per_forward(traced: bool) -> list[float]:
        stamps.clear()
        with tempfile.TemporaryDirectory() as folder, torch.no_grad():
            if traced:
                with nbtrace.trace(model, debug_path=folder, use_repr=not args.safetensors, do_prune_layers=False,
                                   measure_rounding=False):
                    model.generate(prompt, max_new_tokens=args.steps, do_sample=False)
            else:
                model.generate(prompt, max_new_tokens=args.steps, do_sample=False)
        return [(b - a) * 1e3 for a, b in itertools.pairwise(stamps)]

    per_forward(False)
    plain = [min(x) for x in zip(*(per_forward(False) for _ in range(3)))]
    traced = [min(x) for x in zip(*(per_forward(True) for _ in range(3)))]
    hook.remove()
    # one decode-shaped forward traced in a block of its own (what a single traced forward costs)
    cache_run = model(prompt, use_cache=True)
    token = prompt[:, -1:]
    singles = []
    for _ in range(7):
        with tempfile.TemporaryDirectory() as folder, torch.no_grad():
            cache = type(cache_run.past_key_values)(config=model.config)
            model(prompt, past_key_values=cache)
            start = time.perf_counter()
            with nbtrace.trace(model, debug_path=folder, use_repr=not args.safetensors, do_prune_layers=False,
                               measure_rounding=False):
                model(token, past_key_values=cache)
            singles.append((time.perf_counter() - start) * 1e3)
    early, late = slice(1, 11), slice(len(traced) - 10, len(traced))
    return {
        "plain_step_ms": statistics.median(plain[1:]),
        "traced_step_early_ms": statistics.median(traced[early]),
        "traced_step_late_ms": statistics.median(traced[late]),
        "added_early_ms": statistics.median(t - p for t, p in zip(traced[early], plain[early])),
        "added_late_ms": statistics.median(t - p for t, p in zip(traced[late], plain[late])),
        "single_traced_forward_ms": statistics.median(singles),
    }


def child(args: list[str]) -> dict[str, float]:
    done = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=101, help="forwards: the prefill and steps-1 decode steps")
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--safetensors", action="store_true", help="use_repr=False")
    parser.add_argument("--heap", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--what", default="memory", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps((timing if args.what == "timing" else memory)(args)))
        return
    import nbtrace

    common = ["--steps", str(args.steps), "--layers", str(args.layers), "--hidden", str(args.hidden)]
    print(f"nbtrace from {Path(nbtrace.__file__).parent.parent}; Llama {args.layers} layers, hidden {args.hidden}; "
          f"{args.steps} forwards (the prefill and {args.steps - 1} decode steps); one torch thread\n")
    print("| use_repr | Python heap kept by the Recorder | after reading every step | peak RSS beyond generate |")
    print("|---|---:|---:|---:|")
    for mode in ([], ["--safetensors"]):
        heap = child([*common, *mode, "--heap"])
        rss = child([*common, *mode])
        print(f"| {not mode} | {heap['kept_mb']:.2f} MB | {heap['kept_after_reading_mb']:.2f} MB "
              f"| {rss['peak_extra_mb']:.1f} MB |")
    print("\n| use_repr | untraced step | traced step 1–10 | traced last 10 | added early | added late "
          "| one traced forward alone |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode in ([], ["--safetensors"]):
        t = child([*common, *mode, "--what", "timing"])
        print(f"| {not mode} | {t['plain_step_ms']:.1f} ms | {t['traced_step_early_ms']:.1f} ms "
              f"| {t['traced_step_late_ms']:.1f} ms | {t['added_early_ms']:.1f} ms | {t['added_late_ms']:.1f} ms "
              f"| {t['single_traced_forward_ms']:.1f} ms |")


if __name__ == "__main__":
    main()
