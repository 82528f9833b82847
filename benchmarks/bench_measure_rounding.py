"""What ``measure_rounding`` costs: a traced forward with it off, ``"twin"`` (what ``"auto"``, the default, records
where the model's float64 copy fits), ``"leaves"`` and ``True``, side by side, with the plain forward beside them.

transformers' ``LlamaForCausalLM`` built from a config (seed 0, nothing downloaded), eager attention,
4 layers, hidden 256, intermediate 688, 4 heads, vocabulary 4096, 128 tokens, CPU, under
``torch.no_grad()``, ``use_repr=False``, ``do_prune_layers=False`` (what a porter traces), in float32 and
bfloat16. Rounds are interleaved (one round = each variant once, shuffled); the table gives medians and
each variant's ratio to the traced forward without the option.

    python benchmarks/bench_measure_rounding.py                # 5 rounds
    python benchmarks/bench_measure_rounding.py --rounds 3 --threads 1
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import torch
from interleaved import interleaved_medians  # beside this script

TOKENS = 128
OPTIONS = {"off": False, "twin": "twin", "leaves": "leaves", "True": True}


def build(dtype: torch.dtype):
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=4096, num_hidden_layers=4, hidden_size=256, intermediate_size=688,
                                      num_attention_heads=4, num_key_value_heads=4)
    config._attn_implementation = "eager"
    model = transformers.LlamaForCausalLM(config).to(dtype).eval()
    return model, torch.randint(0, 4096, (1, TOKENS))


def measure(dtype: torch.dtype, rounds: int, scratch: Path) -> dict[str, float]:
    import nbtrace

    model, ids = build(dtype)

    def run(name: str) -> float:
        folder = scratch / name
        start = time.perf_counter()
        if name == "plain":
            with torch.no_grad():
                model(ids, use_cache=False)
            return time.perf_counter() - start
        with torch.no_grad(), nbtrace.trace(model, folder, do_prune_layers=False, use_repr=False,
                                            measure_rounding=OPTIONS[name]):
            model(ids, use_cache=False)
        elapsed = time.perf_counter() - start
        shutil.rmtree(folder, ignore_errors=True)
        return elapsed

    return interleaved_medians(run, (*OPTIONS, "plain"), rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"medians of {args.rounds} interleaved rounds\n")
    print("| dtype | plain ms | traced (off) ms | twin ms | × traced | × plain | leaves ms | × traced | True ms "
          "| × traced |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as scratch:
        for dtype in (torch.float32, torch.bfloat16):
            found = measure(dtype, args.rounds, Path(scratch))
            base, plain = found["off"], found["plain"]
            cells = [f"{plain * 1e3:.0f}", f"{base * 1e3:.0f}", f"{found['twin'] * 1e3:.0f}",
                     f"{found['twin'] / base:.2f}", f"{found['twin'] / plain:.2f}"]
            for name in ("leaves", "True"):
                cells += [f"{found[name] * 1e3:.0f}", f"{found[name] / base:.2f}"]
            print(f"| {str(dtype)[6:]} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
