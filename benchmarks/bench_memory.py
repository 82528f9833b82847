"""Peak memory of a traced forward, against the plain forward's.

Each variant runs in a fresh process: build the model, run two plain forwards
(their activations set the process's peak), then run the variant once and report
how far the peak resident memory rose beyond that, also as a share of the model's weights' bytes (the float64
twin of ``nbtrace.trace``'s defaults, streamed: at most half of them, issue 37). Needs transformers.

    python benchmarks/bench_memory.py [--model wide] [--tokens 512]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

VARIANTS = ["plain", "nbtrace repr pruned", "nbtrace repr unpruned", "nbtrace safetensors pruned",
            "transformers repr pruned", "nbtrace.trace default", "nbtrace.trace twin-off"]


def child(variant: str, model_name: str, tokens: int) -> None:
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    import bench_trace

    bench_trace.TOKENS = tokens
    model, inputs = bench_trace.build(model_name)

    def peak_mb() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    before_any = peak_mb()
    for _ in range(2):  # two plain forwards: the allocator settles
        with torch.no_grad():
            model(**inputs)
    after_plain = peak_mb()
    with tempfile.TemporaryDirectory() as folder:
        if variant == "plain":
            with torch.no_grad():
                model(**inputs)
        elif variant.startswith("nbtrace.trace"):  # the defaults (the float64 twin, streamed), or without the twin
            import nbtrace

            rounding = "auto" if variant.endswith("default") else False
            with nbtrace.trace(model, debug_path=folder, measure_rounding=rounding):
                with torch.no_grad():
                    model(**inputs)
        else:
            impl, mode, prune = variant.split()
            if impl == "nbtrace":
                import nbtrace

                context = nbtrace.model_addition_debugger_context
            else:
                from transformers.model_debugging_utils import model_addition_debugger_context as context
            with context(model, debug_path=folder, do_prune_layers=prune == "pruned", use_repr=mode == "repr"):
                with torch.no_grad():
                    model(**inputs)
        after_variant = peak_mb()
    weights = sum(t.numel() * t.element_size() for t in model.parameters()) / 2**20
    print(json.dumps({"activations": after_plain - before_any, "extra": after_variant - after_plain,
                      "weights": weights}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="wide")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.model, args.tokens)
        return
    print(f"### peak memory, Llama '{args.model}', {args.tokens} tokens (MB of resident memory)\n")
    print("| variant | plain forward's own rise | extra peak of this variant | × the model's weights |")
    print("|---|---:|---:|---:|")
    for variant in VARIANTS:
        out = subprocess.run(
            [sys.executable, __file__, "--model", args.model, "--tokens", str(args.tokens), "--child", variant],
            capture_output=True, text=True, check=True,
        ).stdout.strip().splitlines()[-1]
        result = json.loads(out)
        print(f"| {variant} | {result['activations']:.0f} | {result['extra']:.0f} | "
              f"{result['extra'] / result['weights']:.2f} |")


if __name__ == "__main__":
    main()
