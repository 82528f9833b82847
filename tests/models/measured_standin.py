"""A stand-in for ``trace(..., measure_rounding=True)`` until the capture side lands (branch i17-capture).

It measures what the capture will store per recorded output place (``acc``: RMS(y − T), T the same
call's output in one float64 forward of the whole model; ``scale``: RMS(T); ``one``: RMS(T − T rounded
to y's dtype)) with forward hooks, and lets the verdict read it as ``node.measured`` would be read
(``nbtrace.diff.measure.measured.measured_of``, patched for the block's duration, restored after).
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from nbtrace.core.trace import Trace
from nbtrace.diff.measure import measured as measured_module


def _places(value: Any, place: str = "out") -> list[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        return [(place, value)] if value.is_floating_point() else []
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in _places(v, f"{place}.{i}")]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _places(v, f"{place}.{k}")]
    return []


def _outputs(model: nn.Module, inputs: dict[str, Any]) -> dict[str, dict[str, torch.Tensor]]:
    found: dict[str, dict[str, torch.Tensor]] = {}

    def keep(name: str):
        def hook(_module: nn.Module, _args: Any, out: Any) -> None:  # returns None: the output stays as it is
            found.setdefault(name, dict(_places(out)))
        return hook

    hooks = [module.register_forward_hook(keep(name)) for name, module in model.named_modules()]
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return found


def _rms(x: torch.Tensor) -> float:
    x = x.double()
    x = x[torch.isfinite(x)]
    return float(x.norm()) / math.sqrt(x.numel()) if x.numel() else 0.0


def measure(model: nn.Module, inputs: dict[str, Any]) -> dict[str, dict[str, SimpleNamespace]]:
    """``module name -> place -> (own, acc, scale, one)`` of one forward against its float64 shadow."""
    wide = copy.deepcopy(model).to(torch.float64)
    upcast = {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in inputs.items()}
    low, high = _outputs(model, inputs), _outputs(wide, upcast)
    result: dict[str, dict[str, SimpleNamespace]] = {}
    for name, places in low.items():
        for place, y in places.items():
            t = high.get(name, {}).get(place)
            if t is None or t.shape != y.shape:
                continue
            result.setdefault(name, {})[place] = SimpleNamespace(
                own=None, acc=_rms(y.double() - t), scale=_rms(t), one=_rms(t - t.to(y.dtype).double()))
    return result


@contextlib.contextmanager
def measured(*pairs: tuple[Trace, dict[str, dict[str, SimpleNamespace]]]) -> Iterator[None]:
    """While the block runs, each trace's nodes read their measurements (by module path, the root dropped)."""
    table: dict[int, dict[str, SimpleNamespace]] = {}
    for trace, numbers in pairs:
        for node in trace.nodes():
            name = node.module_path.split(" ", 1)[0].partition(".")[2]
            table[id(node)] = numbers.get(name, {})
    original = measured_module.measured_of
    measured_module.measured_of = lambda node: table.get(id(node)) or original(node)
    try:
        yield
    finally:
        measured_module.measured_of = original
