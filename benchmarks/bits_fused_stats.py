"""Do the fused reductions give the bits of the ops transformers prints? (docs/performance.md, "On a GPU")

The trace format prints ``mean()``, ``std()``, ``min()`` and ``max()`` of each tensor with torch's own
formatting, so a fused form may replace them only where it gives the same bits. This sweeps random tensors
(sizes, scales, offsets, dtypes) on this machine's device and counts the tensors where each fused form
differs from the separate ops:

    python benchmarks/bits_fused_stats.py [--device cuda] [--tensors 400]
"""

from __future__ import annotations

import argparse

import torch


def sweep(dtype: torch.dtype, device: str, count: int) -> dict[str, int]:
    gen = torch.Generator().manual_seed(0)
    differs = {"std_mean: mean": 0, "std_mean: std": 0, "var_mean: mean": 0, "aminmax": 0}
    for i in range(count):
        size = int(torch.randint(2, 200_000, (), generator=gen))
        scale = 10.0 ** float(torch.randint(-3, 3, (), generator=gen))
        tensor = ((torch.randn(size, generator=gen) + 0.01 * (i % 7)) * scale).to(device=device, dtype=dtype)
        std, mean = torch.std_mean(tensor)
        _, mean_v = torch.var_mean(tensor)
        low, high = torch.aminmax(tensor)
        differs["std_mean: mean"] += not torch.equal(mean, tensor.mean())
        differs["std_mean: std"] += not torch.equal(std, tensor.std())
        differs["var_mean: mean"] += not torch.equal(mean_v, tensor.mean())
        differs["aminmax"] += not (torch.equal(low, tensor.min()) and torch.equal(high, tensor.max()))
    return differs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tensors", type=int, default=400)
    args = parser.parse_args()
    print(f"tensors whose fused result differs from the separate op, of {args.tensors} per dtype ({args.device})")
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        print(str(dtype).removeprefix("torch."), sweep(dtype, args.device, args.tensors))


if __name__ == "__main__":
    main()
