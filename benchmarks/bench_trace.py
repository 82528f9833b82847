"""Tracing overhead, side by side: plain forward, transformers' debugger, nbtrace.

Runs every variant interleaved (one round = each variant once, in a shuffled
order), several rounds, and prints medians and ratios to the plain forward
(under ``torch.no_grad()``). Needs transformers (a dev dependency); models are
built from a config with a fixed seed, nothing is downloaded.

    python benchmarks/bench_trace.py                 # both models, 7 rounds
    python benchmarks/bench_trace.py --rounds 3 --models small
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

MODELS = {
    "small": dict(num_hidden_layers=8, hidden_size=256, intermediate_size=688, num_attention_heads=4),
    "wide": dict(num_hidden_layers=12, hidden_size=768, intermediate_size=2048, num_attention_heads=12),
}
TOKENS = 128
VOCAB = 4096


def build(name: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, num_key_value_heads=MODELS[name]["num_attention_heads"], **MODELS[name])
    config._attn_implementation = "eager"
    model = LlamaForCausalLM(config).eval()
    inputs = {"input_ids": torch.randint(0, VOCAB, (1, TOKENS))}
    return model, inputs


def variants(model, inputs, scratch: Path) -> dict[str, Callable[[], None]]:
    import nbtrace
    from transformers.model_debugging_utils import model_addition_debugger_context as hf_context

    def plain() -> None:
        with torch.no_grad():
            model(**inputs)

    def run(context, prune: bool, use_repr: bool, tag: str) -> Callable[[], None]:
        def go() -> None:
            folder = scratch / tag
            with context(model, debug_path=str(folder), do_prune_layers=prune, use_repr=use_repr):
                with torch.no_grad():
                    model(**inputs)
            shutil.rmtree(folder, ignore_errors=True)

        return go

    out = {"plain": plain}
    for impl, context in (("transformers", hf_context), ("nbtrace", nbtrace.model_addition_debugger_context)):
        for prune in (True, False):
            for use_repr in (True, False):
                label = f"{impl} {'repr' if use_repr else 'safetensors'} {'pruned' if prune else 'unpruned'}"
                out[label] = run(context, prune, use_repr, label.replace(" ", "_"))
    return out


def safetensors_alone(model, inputs, scratch: Path, prune: bool) -> Callable[[], None]:
    """Writing exactly the files nbtrace writes, with safetensors and nothing else."""
    import nbtrace
    from safetensors.torch import load_file, save_file

    folder = scratch / "collect"
    with nbtrace.trace(model, debug_path=folder, do_prune_layers=prune, use_repr=False):
        with torch.no_grad():
            model(**inputs)
    tensors = {p.name: load_file(p)["data"] for p in folder.glob("*.safetensors")}
    shutil.rmtree(folder)

    def go() -> None:
        target = scratch / "alone"
        target.mkdir()
        for name, tensor in tensors.items():
            save_file({"data": tensor}, target / name)
        shutil.rmtree(target)

    return go


def measure(name: str, rounds: int, scratch: Path) -> dict[str, float]:
    model, inputs = build(name)
    runs = variants(model, inputs, scratch)
    runs["safetensors alone (pruned files)"] = safetensors_alone(model, inputs, scratch, prune=True)
    runs["safetensors alone (unpruned files)"] = safetensors_alone(model, inputs, scratch, prune=False)
    for go in runs.values():  # warm up
        go()
    times: dict[str, list[float]] = {label: [] for label in runs}
    rng = random.Random(0)
    for _ in range(rounds):
        order = list(runs)
        rng.shuffle(order)
        for label in order:
            gc.collect()
            start = time.perf_counter()
            runs[label]()
            times[label].append(time.perf_counter() - start)
    return {label: statistics.median(values) for label, values in times.items()}


def report(name: str, medians: dict[str, float]) -> str:
    plain = medians["plain"]
    cfg = MODELS[name]
    lines = [
        f"### {name}: Llama, {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, "
        f"intermediate {cfg['intermediate_size']}, {TOKENS} tokens, vocab {VOCAB}, CPU",
        "",
        "| variant | median ms | × plain |",
        "|---|---:|---:|",
    ]
    for label, value in medians.items():
        lines.append(f"| {label} | {value * 1000:.1f} | {value / plain:.2f} |")
    for prune in ("pruned", "unpruned"):
        alone = medians[f"safetensors alone ({prune} files)"]
        traced = medians[f"nbtrace safetensors {prune}"]
        lines.append(
            f"\nnbtrace safetensors {prune}: {traced * 1000:.1f} ms = plain + "
            f"{(traced - plain) / alone:.2f} × safetensors alone ({alone * 1000:.1f} ms)"
        )
    speedups = [
        f"{mode} {prune}: nbtrace is {medians[f'transformers {mode} {prune}'] / medians[f'nbtrace {mode} {prune}']:.1f}x faster"
        for mode in ("repr", "safetensors")
        for prune in ("pruned", "unpruned")
    ]
    lines.append("\n" + "; ".join(speedups))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cpus, {args.rounds} rounds")
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.models:
            print()
            print(report(name, measure(name, args.rounds, Path(scratch))))


if __name__ == "__main__":
    main()
