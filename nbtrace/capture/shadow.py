"""The float64 twin of a measured top-level forward: the twin's fingerprints, ``acc`` of every call, ``own`` of the root.

After the top-level forward returned, the twin recorder (``twin/record.py``) runs the whole model once more in
float64 from a copy of the top-level inputs taken before the forward, float64 through the model's own casts, and
fingerprints every call. While it runs, each call of the twin is paired with the recorded call of the same name
(``<path>``, ``<path>@2``, …) and, with ``measure_rounding=True``, its outputs are compared with the recorded ones
right there (``acc``) and dropped. A recorded call the twin never makes (control flow that differs in float64),
an output changed in place after its call, or a shape that differs gets a null ``acc`` and the reason.

Memory: with ``measure_rounding=True`` the recorded float outputs of the forward are kept until the twin has run
(as autograd keeps activations), plus one float64 copy of the model and of the top-level inputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from .rounding_numbers import ROOT, acc_numbers, describe, float_leaves, mismatch, own_numbers

if TYPE_CHECKING:  # pragma: no cover
    from .rounding import Measures, RoundingMeter

_UNPAIRED = "acc: the float64 forward made no call of this name (its control flow differs)"


def shadow_forward(meter: RoundingMeter, measures: Measures, out: Any) -> None:
    """Run the twin; note ``acc`` (``measure_rounding=True``) and the root's ``own`` as it runs."""
    leaves = float_leaves(out)
    start = measures.twin_start
    if start is None:
        return
    paired: set[str] = set()
    root = measures.run.root

    def observe(key: str, result: Any) -> None:
        if key == root:
            _note_root(meter, measures, leaves, result)
            return
        kept = measures.kept.get(key)
        if kept is not None:
            paired.add(key)
            _note_acc(measures, kept, result)

    numbers = measures.twin.done(start, out, measures.batch, observe)
    measures.twin_numbers = numbers
    if numbers.problem is not None:
        for place, _ in leaves:
            measures.tensor(ROOT, place).reasons.append(numbers.problem)
        _unpaired(measures, set(), f"acc: {numbers.problem}")
        return
    _unpaired(measures, paired, _UNPAIRED)


def _note_root(meter: RoundingMeter, measures: Measures, leaves: list[tuple[str, torch.Tensor]], result: Any) -> None:
    truth = dict(float_leaves(result))
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


def _unpaired(measures: Measures, paired: set[str], reason: str) -> None:
    """Give every kept call the float64 forward did not pair ``reason`` (its ``acc`` stays null)."""
    for key, (node, kept) in measures.kept.items():
        if key not in paired:
            for place, _, _ in kept:
                measures.tensor(node, place).reasons.append(reason)
    measures.kept = {}


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
