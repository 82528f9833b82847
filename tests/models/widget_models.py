"""Models and traces for the notebook-side tests (widget, magic, HTML, browser): all built from code."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import torch
from torch import nn

import nbtrace


class Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


class SafeLog(nn.Module):
    """Not safe at all: log of a value that can be negative, the NaN the nan_hunt notebook finds."""

    def forward(self, x):
        return torch.log(x)


class NanNet(nn.Module):
    """``encoder.log`` is the first module whose output holds NaN; ``head`` inherits it."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential()
        self.encoder.add_module("proj", nn.Linear(6, 6))
        self.encoder.add_module("log", SafeLog())
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        return self.head(self.encoder(x))


class Exploding(nn.Module):
    """``boost`` multiplies by 1000: a jump of scale the widget must flag."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.boost = Scale(1000.0)
        self.out = nn.Linear(8, 8)

    def forward(self, x):
        return self.out(self.boost(self.proj(x)))


def record(model: nn.Module, *args: Any, folder: Path, use_repr: bool = True, prune: bool = True, **kwargs: Any):
    """Trace one forward of ``model`` into ``folder``; returns the Trace (partial if the forward raised)."""
    torch.manual_seed(0)
    with nbtrace.trace(model, debug_path=folder, use_repr=use_repr, do_prune_layers=prune) as rec:
        try:
            model(*args, **kwargs)
        except Exception:
            pass
    assert rec.trace is not None
    return rec.trace


def demo_trace(folder: Path, **options: Any) -> nbtrace.Trace:
    from nbtrace.demo import build_demo

    model, inputs = build_demo()
    return record(model, folder=folder, **inputs, **options)


def _tensor(shape: list[int], mean: float, std: float) -> dict[str, Any]:
    def stat(x: float) -> str:
        return f"tensor({x:.4e})" if math.isfinite(x) else f"tensor({x})"

    return {
        "shape": f"torch.Size({shape})",
        "dtype": "torch.float32",
        "mean": stat(mean),
        "std": stat(std),
        "min": stat(mean - 3 * std),
        "max": stat(mean + 3 * std),
    }


def synthetic_tree(layers: int = 400, experts: int = 8, nan_layer: int | None = None) -> dict[str, Any]:
    """A SUMMARY-style call tree shaped like a mixture-of-experts decoder: 50 calls per layer.

    ``layers=400, experts=8`` gives 20,004 calls. With ``nan_layer``, that layer's
    ``mlp.experts.3.down_proj`` records a NaN.
    """
    rng = random.Random(0)
    hidden = [1, 16, 64]

    def leaf(path: str, shape: list[int] | None = None, nan: bool = False) -> dict[str, Any]:
        std = rng.uniform(0.3, 1.5)
        out = _tensor(shape or hidden, rng.uniform(-0.05, 0.05), std)
        if nan:
            out = _tensor(shape or hidden, float("nan"), float("nan"))
        return {"module_path": path, "inputs": {"args": [_tensor(hidden, 0.0, 1.0)]}, "outputs": out}

    def parent(path: str, children: list[dict[str, Any]]) -> dict[str, Any]:
        return {"module_path": path, "inputs": {"args": [_tensor(hidden, 0.0, 1.0)]}, "children": children}

    root = "BigMoE"
    blocks = [leaf(f"{root}.embed_tokens")]
    for n in range(layers):
        base = f"{root}.layers.{n}"
        attn = parent(
            f"{base}.self_attn",
            [leaf(f"{base}.self_attn.{name}") for name in ("q_proj", "k_proj", "v_proj", "o_proj")],
        )
        expert_calls = []
        for e in range(experts):
            ex = f"{base}.mlp.experts.{e}"
            bad = nan_layer == n and e == 3
            expert_calls.append(
                parent(
                    ex,
                    [
                        leaf(f"{ex}.gate_proj", [1, 16, 128]),
                        leaf(f"{ex}.act_fn", [1, 16, 128]),
                        leaf(f"{ex}.up_proj", [1, 16, 128]),
                        leaf(f"{ex}.down_proj", nan=bad),
                    ],
                )
            )
        mlp = parent(f"{base}.mlp", [leaf(f"{base}.mlp.gate", [1, 16, experts]), *expert_calls])
        blocks.append(
            parent(
                base,
                [leaf(f"{base}.input_layernorm"), attn, leaf(f"{base}.post_attention_layernorm"), mlp],
            )
        )
    blocks += [leaf(f"{root}.norm"), leaf(f"{root}.lm_head", [1, 16, 256])]
    return {"module_path": root, "inputs": {"args": [_tensor([1, 16], 100.0, 50.0)]}, "children": blocks}


def synthetic_trace(**options: Any) -> nbtrace.Trace:
    """``synthetic_tree`` as a SUMMARY Trace (20,004 calls by default)."""
    return nbtrace.Trace.from_tree(synthetic_tree(**options), kind="summary")


class FakeComparison:
    """Stands in for nbtrace.compare's Comparison in tests that must not depend on its numbers."""

    def __init__(self, a: nbtrace.Trace, b: nbtrace.Trace, first_path: str) -> None:
        self.a, self.b = a, b
        self._report = []
        diverged = False
        for node in a.nodes():
            if node.module_path == first_path:
                status, diverged = "first", True
            elif diverged and not node.children:
                status = "diverged"
            elif not node.output_tensors():
                status = "no_data"
            else:
                status = "match"
            self._report.append(
                {"status": status, "b_path": node.module_path.replace(a.model_name, b.model_name, 1), "score": 0.25}
            )
        self.first_divergence = type("FirstDivergence", (), {"module_path": first_path})()

    def node_report(self) -> list[dict[str, Any]]:
        return [dict(row) for row in self._report]
