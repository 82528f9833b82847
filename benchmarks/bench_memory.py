"""Peak memory of a traced forward, against the plain forward's.

Each variant runs in a fresh process, ``--repeats`` times: build the model, run two plain forwards
(their activations set the process's peak), then run the variant once and report
how far the peak resident memory rose beyond that, also as a share of the model's weights' bytes (the float64
twin of ``nbtrace.trace``'s defaults, streamed: at most half of them, issue 37). The table shows the worst of the
repeats and every repeat's number: the host allocator's heap makes them vary. Models: the Llamas of
``bench_trace.py`` (``small``, ``wide``: needs transformers), ``mlp`` (8 linear layers of 2048), ``cnn`` (8
convolutions of 512 channels on 16×16 images) and ``vocab`` (a 4-layer Llama of width 512 whose 32,000-row embedding
and output head are most of its weights).

    python benchmarks/bench_memory.py [--model wide] [--tokens 512] [--repeats 5] [--variants default,twin-off]
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


def build(model_name: str, tokens: int):
    """The model named ``model_name`` (seed 0) and its keyword inputs."""
    import torch
    from torch import nn

    class Model(nn.Module):  # called with one keyword argument ``x``, as the Llamas with ``input_ids``
        def __init__(self, layers: list[nn.Module]) -> None:
            super().__init__()
            self.layers = nn.Sequential(*layers)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layers(x)

    torch.manual_seed(0)
    if model_name == "mlp":
        layers = [nn.Sequential(nn.Linear(2048, 2048), nn.GELU(), nn.LayerNorm(2048)) for _ in range(8)]
        return Model(layers).eval(), {"x": torch.randn(tokens, 2048)}
    if model_name == "cnn":
        layers = [nn.Conv2d(3, 512, 3, padding=1)] + [nn.Sequential(nn.BatchNorm2d(512), nn.ReLU(),
                                                                  nn.Conv2d(512, 512, 3, padding=1)) for _ in range(8)]
        return Model(layers).eval(), {"x": torch.randn(1, 3, 16, 16)}
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_trace

    bench_trace.TOKENS = tokens
    if model_name == "vocab":
        bench_trace.CASES["vocab"] = bench_trace.Case("LlamaForCausalLM", 4, 512, 1376, 8, 8, 32000, "eager",
                                                      grad=False)
    return bench_trace.build(model_name)


def child(variant: str, model_name: str, tokens: int) -> None:
    import torch

    model, inputs = build(model_name, tokens)

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
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per variant (the worst is shown)")
    parser.add_argument("--variants", default=None,
                        help="comma-separated variants, or their last words (default: all): " + ", ".join(VARIANTS))
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.model, args.tokens)
        return
    chosen = VARIANTS if args.variants is None else [
        v for v in VARIANTS if any(v == w or v.endswith(" " + w) for w in args.variants.split(","))]
    print(f"### peak memory, '{args.model}', {args.tokens} tokens, worst of {args.repeats} fresh processes "
          f"(MB of resident memory)\n")
    print("| variant | plain forward's own rise | extra peak of this variant (worst) | × the model's weights | "
          "every repeat's extra peak |")
    print("|---|---:|---:|---:|---|")
    for variant in chosen:
        results = []
        for _ in range(args.repeats):
            out = subprocess.run(
                [sys.executable, __file__, "--model", args.model, "--tokens", str(args.tokens), "--child", variant],
                capture_output=True, text=True, check=True,
            ).stdout.strip().splitlines()[-1]
            results.append(json.loads(out))
        worst = max(results, key=lambda r: r["extra"])
        print(f"| {variant} | {worst['activations']:.0f} | {worst['extra']:.0f} | "
              f"{worst['extra'] / worst['weights']:.2f} | {', '.join(str(round(r['extra'])) for r in results)} |",
              flush=True)


if __name__ == "__main__":
    main()
