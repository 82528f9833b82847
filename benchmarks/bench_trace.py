"""Tracing overhead, side by side: plain forward, transformers' debugger, nbtrace.

Runs every variant of a case interleaved (one round = each variant once, in a
shuffled order), several rounds, and prints medians and ratios. A ratio's
denominator is always the plain forward of its case: the same call without
tracing, in the same grad mode as the traced call (each case says which).
Needs transformers (a dev dependency); models are built from a config with a
fixed seed, nothing is downloaded.

Cases:

- ``small`` and ``wide``: ``LlamaForCausalLM``, eager attention, vocabulary
  4096; the traced call and the plain one run under ``torch.no_grad()``.
- ``notebook``: how a user often runs it: ``LlamaModel`` (no lm_head), default
  sdpa attention, 8 heads / 4 kv heads, hidden 256, intermediate 688, 8 layers,
  vocabulary 1000, ``use_cache=False``; the traced call and the plain one run
  with grad mode on, as in a notebook cell.

All cases: 128 tokens, ``debug_path`` set, CPU.

    python benchmarks/bench_trace.py                 # every case, 7 rounds
    python benchmarks/bench_trace.py --rounds 3 --cases notebook
    python benchmarks/bench_trace.py --threads 1 --clock cpu   # steadier on a shared machine

The last table printed ("summary") has one row per case and a fixed set of
columns, for tools that read the numbers back.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

TOKENS = 128


@dataclass(frozen=True)
class Case:
    """One model, its inputs, and the grad mode both the plain and the traced call run in."""

    model_class: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    attention: str | None  # None: transformers' default (sdpa)
    grad: bool
    extra_inputs: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        attention = self.attention or "sdpa (default)"
        mode = "grad mode on" if self.grad else "torch.no_grad()"
        return (
            f"{self.model_class}, {self.layers} layers, hidden {self.hidden}, intermediate {self.intermediate}, "
            f"{self.heads} heads / {self.kv_heads} kv heads, {attention} attention, vocab {self.vocab}, "
            f"{TOKENS} tokens, CPU; plain and traced call under {mode}"
        )


CASES = {
    "small": Case("LlamaForCausalLM", 8, 256, 688, 4, 4, 4096, "eager", grad=False),
    "wide": Case("LlamaForCausalLM", 12, 768, 2048, 12, 12, 4096, "eager", grad=False),
    "notebook": Case("LlamaModel", 8, 256, 688, 8, 4, 1000, None, grad=True, extra_inputs={"use_cache": False}),
}
#: the columns of the summary table, in order (ratios to the plain forward)
SUMMARY_VARIANTS = [
    "nbtrace repr pruned",
    "nbtrace repr unpruned",
    "nbtrace safetensors pruned",
    "nbtrace safetensors unpruned",
    "transformers repr pruned",
    "transformers repr unpruned",
]


def build(name: str):
    """The model of case ``name`` (random init, seed 0) and its inputs."""
    import transformers

    case = CASES[name]
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=case.vocab,
        num_hidden_layers=case.layers,
        hidden_size=case.hidden,
        intermediate_size=case.intermediate,
        num_attention_heads=case.heads,
        num_key_value_heads=case.kv_heads,
    )
    if case.attention:
        config._attn_implementation = case.attention
    model = getattr(transformers, case.model_class)(config).eval()
    inputs = {"input_ids": torch.randint(0, case.vocab, (1, TOKENS)), **case.extra_inputs}
    return model, inputs


def grad_mode(case: Case) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext() if case.grad else torch.no_grad()


def variants(case: Case, model, inputs, scratch: Path) -> dict[str, Callable[[], None]]:
    import nbtrace
    from transformers.model_debugging_utils import model_addition_debugger_context as hf_context

    def plain() -> None:
        with grad_mode(case):
            model(**inputs)

    def run(context, prune: bool, use_repr: bool, tag: str) -> Callable[[], None]:
        def go() -> None:
            folder = scratch / tag
            with context(model, debug_path=str(folder), do_prune_layers=prune, use_repr=use_repr):
                with grad_mode(case):
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


def safetensors_alone(case: Case, model, inputs, scratch: Path, prune: bool) -> Callable[[], None]:
    """Writing exactly the files nbtrace writes, with safetensors and nothing else."""
    import nbtrace
    from safetensors.torch import load_file, save_file

    folder = scratch / "collect"
    with nbtrace.trace(model, debug_path=folder, do_prune_layers=prune, use_repr=False, measure_rounding=False):
        with grad_mode(case):
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


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def measure(name: str, rounds: int, scratch: Path, clock: str = "wall") -> dict[str, float]:
    """Median seconds of each variant of case ``name`` over ``rounds`` interleaved rounds.

    ``clock``: ``wall`` (elapsed time), or ``cpu`` (the CPU time of this process: steadier on a
    shared machine; with several torch threads it also counts their spinning).
    """
    now = CLOCKS[clock]
    case = CASES[name]
    model, inputs = build(name)
    runs = variants(case, model, inputs, scratch)
    runs["safetensors alone (pruned files)"] = safetensors_alone(case, model, inputs, scratch, prune=True)
    runs["safetensors alone (unpruned files)"] = safetensors_alone(case, model, inputs, scratch, prune=False)
    for go in runs.values():  # warm up
        go()
    times: dict[str, list[float]] = {label: [] for label in runs}
    rng = random.Random(0)
    for _ in range(rounds):
        order = list(runs)
        rng.shuffle(order)
        for label in order:
            gc.collect()
            start = now()
            runs[label]()
            times[label].append(now() - start)
    return {label: statistics.median(values) for label, values in times.items()}


def report(name: str, medians: dict[str, float]) -> str:
    """The table of one case: every variant's median and its ratio to the plain forward."""
    plain = medians["plain"]
    lines = [
        f"### {name}: {CASES[name].describe()}",
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


def summary(results: dict[str, dict[str, float]], rounds: int, clock: str = "wall") -> str:
    """One row per case: the plain forward (and its grad mode) and each variant's ratio to it."""
    lines = [
        f"### summary: × plain, medians of {rounds} interleaved rounds, {clock} clock",
        "",
        "| case | plain runs under | plain ms | " + " | ".join(SUMMARY_VARIANTS) + " |",
        "|---|---|---:|" + "---:|" * len(SUMMARY_VARIANTS),
    ]
    for name, medians in results.items():
        plain = medians["plain"]
        mode = "grad mode on" if CASES[name].grad else "no_grad"
        ratios = " | ".join(f"{medians[label] / plain:.2f}" for label in SUMMARY_VARIANTS)
        lines.append(f"| {name} | {mode} | {plain * 1000:.1f} | {ratios} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cases", "--models", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--clock", choices=list(CLOCKS), default="wall", help="what a run's time is (default: wall)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cpus, "
        f"{args.rounds} rounds, {args.clock} clock"
    )
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.cases:
            results[name] = measure(name, args.rounds, Path(scratch), args.clock)
            print()
            print(report(name, results[name]))
    print()
    print(summary(results, args.rounds, args.clock))


if __name__ == "__main__":
    main()
