"""The float64 shadow forward of a measured top-level forward: ``acc`` of every call, ``own`` of the root.

After the top-level forward returned, the whole model is copied to float64 (``float64.py``) and run
once on a float64 copy of the top-level inputs taken before the forward. Every submodule's
``forward`` of the copy is wrapped by a collector that counts calls per module path exactly as the
recorder does (``<path>``, ``<path>@2``, …), so each call of the shadow pairs with the recorded call of
the same name; its outputs are compared with the recorded ones right there (``acc``) and dropped.
A recorded call the shadow never makes (control flow that differs in float64), an output changed in
place after its call, or a shape that differs gets a null ``acc`` and the reason.

Memory: the recorded float outputs of the forward are kept until the shadow has run (as autograd
keeps activations), plus one float64 copy of the model and of the top-level inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from .float64 import exact_numerics, float64_copy
from .rounding_numbers import ROOT, acc_numbers, describe, float_leaves, mismatch, own_numbers
from .speculate import named_modules

if TYPE_CHECKING:  # pragma: no cover
    from .rounding import Measures, RoundingMeter

_UNPAIRED = "acc: the float64 forward made no call of this name (its control flow differs)"


def shadow_forward(meter: RoundingMeter, measures: Measures, out: Any) -> None:
    """Run the float64 forward and note ``acc`` (``measure_rounding=True``) and the root's ``own``."""
    leaves = float_leaves(out)
    if measures.top_inputs is None:
        if measures.top_problem is not None:
            for place, _ in leaves:
                measures.tensor(ROOT, place).reasons.append(measures.top_problem)
            _unpaired(measures, set(), f"acc: {measures.top_problem}")
        return
    paired: set[str] = set()
    try:
        with meter.paused(), exact_numerics():
            wide = float64_copy(meter.recorder.model)
            if meter.mode == "all":
                _install(wide, meter.recorder.class_name, measures, paired)
            args, kwargs = measures.top_inputs
            truth = dict(float_leaves(wide.forward(*args, **kwargs)))
            del wide
    except Exception as exc:  # noqa: BLE001 - a model that cannot run in float64 keeps its trace
        failed = f"the float64 forward of the whole model failed ({describe(exc)})"
        for place, _ in leaves:
            measures.tensor(ROOT, place).reasons.append(failed)
        _unpaired(measures, paired, f"acc: {failed}")
        return
    finally:
        measures.top_inputs = None
    for place, y in leaves:
        entry = measures.tensor(ROOT, place)
        problem = mismatch(y, truth.get(place))
        if problem is not None:
            entry.reasons.append(problem)
            continue
        numbers = own_numbers(y, truth[place])  # at the root, its own inputs are the forward's: own = acc
        entry.own = measures.batch.add(numbers)
        if meter.mode == "all":
            entry.acc = measures.batch.add(numbers[:2])
    _unpaired(measures, paired, _UNPAIRED)


def _unpaired(measures: Measures, paired: set[str], reason: str) -> None:
    """Give every kept call the float64 forward did not pair ``reason`` (its ``acc`` stays null)."""
    for key, (node, kept) in measures.kept.items():
        if key not in paired:
            for place, _, _ in kept:
                measures.tensor(node, place).reasons.append(reason)
    measures.kept = {}


def _install(wide: nn.Module, class_name: str, measures: Measures, paired: set[str]) -> None:
    """Wrap every submodule's forward of the float64 copy with a collector named like the recorder's calls."""
    counts: dict[str, int] = {}
    for name, module in named_modules(wide):
        if not name or hasattr(type(getattr(type(module), "forward", None)), "__set__"):
            continue  # the root is run directly; a forward property cannot be wrapped (its calls stay unpaired)
        module.__dict__["forward"] = _collector(f"{class_name}.{name}", module.forward, counts, measures, paired)


def _collector(path: str, inner: Callable, counts: dict[str, int], measures: Measures,
               paired: set[str]) -> Callable:
    def collect(*args: Any, **kwargs: Any) -> Any:
        result = inner(*args, **kwargs)
        count = counts[path] = counts.get(path, 0) + 1
        key = path if count == 1 else f"{path}@{count}"
        kept = measures.kept.get(key)
        if kept is not None:
            paired.add(key)
            _note_acc(measures, kept, result)
        return result

    return collect


def _note_acc(measures: Measures, kept: tuple[int, list[tuple[str, torch.Tensor, int | None]]], result: Any) -> None:
    node, tensors = kept
    try:
        truth = dict(float_leaves(result))
        for place, y, version in tensors:
            entry = measures.tensor(node, place)
            if version is not None and y._version != version:
                entry.reasons.append("acc: the recorded tensor was changed in place after its call")
                continue
            problem = mismatch(y, truth.get(place))
            if problem is not None:
                entry.reasons.append(f"acc: {problem}")
            else:
                entry.acc = measures.batch.add(acc_numbers(y, truth[place]))
    except Exception as exc:  # noqa: BLE001 - one odd output must not stop the float64 forward
        for place, _, _ in tensors:
            measures.tensor(node, place).reasons.append(f"acc: not measured ({describe(exc)})")
