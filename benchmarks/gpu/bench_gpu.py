"""Issue 19's table: tracing on a GPU against the plain forward.

    python benchmarks/gpu/bench_gpu.py                  # on a CUDA GPU: both Llama sizes, bf16
    python benchmarks/gpu/bench_gpu.py --device cpu --small --rounds 1   # a smoke test of the script

transformers' Llama (``LlamaModel``, built from a config, random init, seed 0), ``use_cache=False``, bf16 on
the GPU (float32 on a CPU). Every variant runs in interleaved rounds, the medians are printed: the plain
forward (under ``torch.no_grad()``), nbtrace's four modes, transformers' repr pruned, and ``save_file`` alone
writing the tensors of nbtrace's unpruned safetensors trace from host memory (the disk's floor, with its
throughput). Each traced run writes into a fresh folder. Timing: ``torch.cuda.Event`` pairs on a GPU (the
end event is recorded after the call returns, so host work counts), ``time.perf_counter`` on a CPU. Then, per
size: synchronisations per forward (``torch.cuda.set_sync_debug_mode``), aten operations per recorded tensor
beyond the plain forward's (a ``TorchDispatchMode``; on a GPU each is at least one kernel), and peak GPU
memory above the model's. Without a GPU (and no ``--device cpu``) it says so and exits 0.
"""

from __future__ import annotations

import argparse
import gc
import random
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

NEEDS_GPU = "bench_gpu.py needs a CUDA GPU and found none; `--device cpu --small` runs it as a smoke test"


@dataclass(frozen=True)
class Size:
    layers: int
    hidden: int
    intermediate: int
    heads: int
    tokens: int
    vocab: int = 32000

    def label(self) -> str:
        return f"{self.layers} layers x {self.hidden}, {self.tokens} tokens"


SIZES = [Size(8, 512, 1376, 8, 128), Size(16, 2048, 8192, 16, 1024)]
SMALL = [Size(2, 64, 172, 4, 16, vocab=256)]
VARIANTS = ["plain", "nbtrace repr pruned", "nbtrace repr unpruned", "nbtrace safetensors pruned",
            "nbtrace safetensors unpruned", "transformers repr pruned"]


def build(size: Size, device: str, dtype: torch.dtype):
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=size.vocab, num_hidden_layers=size.layers, hidden_size=size.hidden,
        intermediate_size=size.intermediate, num_attention_heads=size.heads, num_key_value_heads=size.heads,
    )
    model = transformers.LlamaModel(config).eval().to(device=device, dtype=dtype)
    inputs = {"input_ids": torch.randint(0, size.vocab, (1, size.tokens), device=device), "use_cache": False}
    return model, inputs


def runs(model, inputs, scratch: Path) -> dict[str, Callable[[], None]]:
    import nbtrace
    from transformers.model_debugging_utils import model_addition_debugger_context as hf_context

    def plain() -> None:
        with torch.no_grad():
            model(**inputs)

    def traced(context, prune: bool, use_repr: bool, tag: str) -> Callable[[], None]:
        count = [0]

        def go() -> None:
            count[0] += 1
            folder = scratch / f"{tag}_{count[0]}"  # a fresh folder per run
            with context(model, debug_path=str(folder), do_prune_layers=prune, use_repr=use_repr):
                model(**inputs)
            shutil.rmtree(folder, ignore_errors=True)

        return go

    out = {"plain": plain}
    for label in VARIANTS[1:]:
        impl, mode, pruning = label.split()
        context = nbtrace.model_addition_debugger_context if impl == "nbtrace" else hf_context
        out[label] = traced(context, pruning == "pruned", mode == "repr", label.replace(" ", "_"))
    return out


def save_alone(model, inputs, scratch: Path) -> tuple[Callable[[], None], int]:
    """``save_file`` writing the files of nbtrace's unpruned safetensors trace from host memory; their bytes."""
    import nbtrace
    from safetensors.torch import load_file, save_file

    folder = scratch / "collect"
    with nbtrace.trace(model, debug_path=folder, do_prune_layers=False, use_repr=False):
        model(**inputs)
    tensors = {p.name: load_file(p)["data"] for p in folder.glob("*.safetensors")}
    size = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    shutil.rmtree(folder)

    def go() -> None:
        target = scratch / "alone"
        target.mkdir()
        for name, tensor in tensors.items():
            save_file({"data": tensor}, target / name)
        shutil.rmtree(target)

    return go, size


def timed(go: Callable[[], None], device: str) -> float:
    """Seconds one call takes: CUDA events on a GPU, the wall clock elsewhere."""
    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        go()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000
    begin = time.perf_counter()
    go()
    return time.perf_counter() - begin


def medians(calls: dict[str, Callable[[], None]], rounds: int, device: str) -> dict[str, float]:
    if rounds > 1:  # warm up (and the parameters' fingerprints, computed once per process); one round: a smoke test
        for go in calls.values():
            go()
    times: dict[str, list[float]] = {label: [] for label in calls}
    rng = random.Random(0)
    for _ in range(rounds):
        order = list(calls)
        rng.shuffle(order)
        for label in order:
            times[label].append(timed(calls[label], device))
    return {label: statistics.median(values) for label, values in times.items()}


class _Ops(TorchDispatchMode):
    """Counts the aten operations that launch work where the model lives: no views, and on a GPU none that
    read only host tensors (nbtrace's work on the copies that crossed already launches no kernel)."""

    def __init__(self, device: str) -> None:
        super().__init__()
        self.device = device
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and (self.device == "cpu" or any(
                isinstance(a, torch.Tensor) and a.device.type == self.device
                for a in torch.utils._pytree.tree_leaves((args, kwargs)))):
            self.count += 1
        return func(*args, **(kwargs or {}))


def ops_per_tensor(model, inputs, scratch: Path, device: str) -> float:
    """aten operations of nbtrace's repr unpruned trace beyond the plain forward's, per recorded tensor (after a
    warm-up trace: the parameters' fingerprints are computed once per process)."""
    import nbtrace

    with torch.no_grad(), _Ops(device) as plain:
        model(**inputs)
    with nbtrace.trace(model, debug_path=scratch / "ops_warm", do_prune_layers=False):
        model(**inputs)
    with nbtrace.trace(model, debug_path=scratch / "ops", do_prune_layers=False) as rec:
        with _Ops(device) as traced:
            model(**inputs)
    shutil.rmtree(scratch / "ops_warm", ignore_errors=True)
    shutil.rmtree(scratch / "ops", ignore_errors=True)
    tensors = sum(1 for node in rec.trace.nodes() for _ in node.tensors())
    return (traced.count - plain.count) / tensors, tensors


def launch_seconds(device: str, hidden: int, tokens: int) -> float:
    """What the host spends to launch one small reduction (``x.mean()`` of one activation): the floor of the cost
    of each operation nbtrace adds, however little work the GPU does for it."""
    x = torch.randn(1, tokens, hidden, device=device, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    for _ in range(100):
        x.mean()
    if device == "cuda":
        torch.cuda.synchronize()
    begin = time.perf_counter()
    for _ in range(2000):
        x.mean()
    seconds = (time.perf_counter() - begin) / 2000
    if device == "cuda":
        torch.cuda.synchronize()
    return seconds


def syncs(go: Callable[[], None], device: str) -> int | None:
    """Synchronisations of the device during ``go`` (None off a GPU)."""
    if device != "cuda":
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            go()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def peak_above(go: Callable[[], None], device: str) -> float | None:
    """Peak GPU memory during ``go`` above what was allocated before it, in MiB (None off a GPU)."""
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    go()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def measure(size: Size, device: str, dtype: torch.dtype, rounds: int, scratch: Path) -> dict:
    model, inputs = build(size, device, dtype)
    calls = runs(model, inputs, scratch)
    alone, file_bytes = save_alone(model, inputs, scratch)
    calls["save_file alone"] = alone
    ops, tensors = ops_per_tensor(model, inputs, scratch, device)
    result = {"size": size, "medians": medians(calls, rounds, device), "bytes": file_bytes, "ops": ops,
              "tensors": tensors, "launch": launch_seconds(device, size.hidden, size.tokens)}
    watched = ("plain", "nbtrace repr pruned", "nbtrace repr unpruned", "transformers repr pruned")
    result["syncs"] = {label: syncs(calls[label], device) for label in watched}
    result["peak"] = {label: peak_above(calls[label], device) for label in watched}
    del model
    gc.collect()
    return result


def _cell(value, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:.0f}{unit}"


def table(results: list[dict], device: str) -> str:
    head = ["model, tokens", "plain", *(label.removeprefix("nbtrace ") for label in VARIANTS[1:])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for result in results:
        m = result["medians"]
        ratios = [f"{m[label] / m['plain']:.2f}x" for label in VARIANTS[1:]]
        lines.append(f"| {result['size'].label()} | {m['plain'] * 1000:.1f} ms | " + " | ".join(ratios) + " |")
    lines.append("")
    for result in results:
        m, size = result["medians"], result["size"]
        alone, throughput = m["save_file alone"], result["bytes"] / m["save_file alone"] / 2**20
        floor = m["plain"] + 1.2 * alone
        lines.append(f"{size.label()}: save_file alone {alone * 1000:.1f} ms for {result['bytes'] / 2**20:.1f} MiB "
                     f"({throughput:.0f} MiB/s); safetensors unpruned {m['nbtrace safetensors unpruned'] * 1000:.1f} "
                     f"ms against the goal plain + 1.2 x save_file = {floor * 1000:.1f} ms")
        lines.append(f"{size.label()}: aten operations per recorded tensor (repr unpruned): {result['ops']:.2f}")
        launches = result["ops"] * result["tensors"] * result["launch"]
        lines.append(f"{size.label()}: the host launches one reduction in {result['launch'] * 1e6:.1f} us; "
                     f"{result['tensors']} recorded tensors x {result['ops']:.2f} operations = {launches * 1000:.1f} ms "
                     f"of launches alone: repr unpruned cannot go below {(m['plain'] + launches) / m['plain']:.2f}x "
                     "with torch's own reductions")
        syncs_, peaks = result["syncs"], result["peak"]
        lines.append(f"{size.label()}: syncs per forward: " + ", ".join(
            f"{label} {_cell(n)}" for label, n in syncs_.items()))
        lines.append(f"{size.label()}: peak memory above the model: " + ", ".join(
            f"{label} {_cell(v, ' MiB')}" for label, v in peaks.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--small", action="store_true", help="a tiny Llama: a smoke test of the script")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(NEEDS_GPU)
        return 0
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    card = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"{card}, torch {torch.__version__}, {str(dtype).removeprefix('torch.')}, {args.rounds} rounds, medians")
    results = []
    with tempfile.TemporaryDirectory(prefix="nbtrace-bench-gpu-") as scratch:
        for size in SMALL if args.small else SIZES:
            results.append(measure(size, args.device, dtype, args.rounds, Path(scratch)))
            print(table(results[-1:], args.device) + "\n", flush=True)  # each size as it is done
    print(table(results, args.device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
