"""What recording the backward costs: a training step traced with ``backward=True`` against the same step plain.

    PYTHONPATH=. python benchmarks/bench_backward.py [--layers 4] [--hidden 256] [--seq 256] [--rounds 5] [--no-twin]

transformers' Llama built from a config (no download), float32 on the CPU, batch 2, a causal-LM loss and its
``backward()``; side by side in one run, the median seconds of:

- ``plain``: forward and backward, nothing traced;
- ``forward alone`` and ``forward alone, traced``: the forward without its backward, plain (under ``no_grad``) and
  traced as without the option (pruned, printed values, no twin): what the forward's own trace costs;
- ``forward alone, twin``: traced with the default ``measure_rounding`` (the forward's float64 twin);
- ``backward, no twin``: ``backward=True`` with ``measure_rounding=False`` (pruned, printed values);
- ``backward, default``: ``backward=True`` with the default ``measure_rounding`` (the forward's float64 twin, and
  its backward);
- ``backward, full tensors``: ``backward=True``, ``use_repr=False``, no twin.

The cases run in turn, round after round; each is printed with its median seconds and the median of its ratio to
that round's ``plain``. The goal of issue 38: at most 1.5x for the pruned printed capture.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nbtrace


def _model(layers: int, hidden: int) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=1024, hidden_size=hidden, intermediate_size=hidden * 4, num_hidden_layers=layers,
                         num_attention_heads=max(1, hidden // 64), num_key_value_heads=max(1, hidden // 64),
                         max_position_embeddings=4096, attn_implementation="sdpa", use_cache=False)
    return LlamaForCausalLM(config).train()


def _step(model: torch.nn.Module, ids: torch.Tensor) -> None:
    logits = model(input_ids=ids).logits
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    loss.backward()
    model.zero_grad(set_to_none=True)


def _forward_alone(model: torch.nn.Module, ids: torch.Tensor, folder: Path | None = None, **options) -> None:
    with torch.no_grad():
        if folder is None:
            model(input_ids=ids)
            return
        with nbtrace.trace(model, folder, **options):
            model(input_ids=ids)


def _step_plain(model: torch.nn.Module, ids: torch.Tensor) -> None:
    _step(model, ids)


def _traced(model: torch.nn.Module, ids: torch.Tensor, folder: Path, **options) -> None:
    with nbtrace.trace(model, folder, backward=True, **options):
        _step(model, ids)


def _rounds(rounds: int, cases: dict) -> dict[str, tuple[float, float]]:
    """Each case once per round, in turn (a shared machine's load changes within seconds: each round's ratios are
    taken against that round's plain step); per case the median seconds and the median ratio to ``plain``."""
    for run in cases.values():
        run()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, run in cases.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    plain = times["plain"]
    return {name: (statistics.median(found), statistics.median(t / p for t, p in zip(found, plain)))
            for name, found in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-twin", action="store_true", help="leave out the cases with the float64 twin")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    model = _model(args.layers, args.hidden)
    ids = torch.randint(0, 1024, (2, args.seq), generator=torch.Generator().manual_seed(0))
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root)
        cases = {
            "plain": lambda: _step_plain(model, ids),
            "forward alone": lambda: _forward_alone(model, ids),
            "forward alone, traced": lambda: _forward_alone(model, ids, folder / "f", measure_rounding=False),
            "forward alone, twin": lambda: _forward_alone(model, ids, folder / "t"),
            "backward, no twin": lambda: _traced(model, ids, folder / "b", measure_rounding=False),
            "backward, default": lambda: _traced(model, ids, folder / "d"),
            "backward, full tensors": lambda: _traced(model, ids, folder / "s", measure_rounding=False,
                                                      use_repr=False),
        }
        if args.no_twin:
            cases = {name: run for name, run in cases.items() if name not in ("forward alone, twin", "backward, default")}
        results = _rounds(args.rounds, cases)
    print(f"Llama {args.layers} layers, hidden {args.hidden}, batch 2 x {args.seq} tokens, float32, "
          f"{torch.get_num_threads()} threads, median of {args.rounds} rounds (ratio: median of each round's):")
    for name, (seconds, ratio) in results.items():
        print(f"  {name:24s} {seconds * 1000:9.1f} ms  {ratio:5.2f}x")


if __name__ == "__main__":
    main()
