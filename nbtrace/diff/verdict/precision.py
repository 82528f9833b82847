"""Precision findings: where the port computes the same function as the reference but its run lost what the
reference's kept. A finding of its own kind, beside the verdict, never turning "agree" into "diverge".

Only a measured rule that no correct kernel breaks names one. Rounding more than the reference at a call is not
such a rule: measured on a CPU, a bf16 RMSNorm without its float32 upcast rounds about 1.3 times what the
reference's does at its call, eager attention 4 to 5 times what sdpa does, and TF32 matmuls round like float16
inside a float32 model, so a factor either way is a kernel's choice, not a finding. What no correct kernel does:

- ``non-finite``: a NaN or an infinity in the port's output that the reference's output does not hold (float16
  overflowing in ``x.pow(2)``);
- ``lost``: the port's output off its own float64 twin's size by half of it or more (``|run_rms − rms| >= rms/2``,
  measured exactly from both sums of squares; by the triangle inequality the output is at least that far from its
  twin: nothing of the value is left, as when an overflow turns a norm's scale into zero) where the reference's
  keeps it.

Both read the twins' numbers (``acc``, ``run_out``: what each run returned against its own twin, measured as it
recorded); without twins, the recorded tensors' NaN/inf flags give the first rule. The first call, in the order
calls end, where the port's run shows it is named (its inputs, made by calls that ended before it, did not).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...core.node import Node

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Comparison


@dataclass(frozen=True)
class PrecisionFinding:
    """A call where the port's run lost precision the reference kept: ``module_path`` in a's naming."""

    module_path: str
    b_path: str
    rule: str
    sentence: str


def precision_findings(comparison: Comparison) -> list[PrecisionFinding]:
    """The first precision finding of a comparison, in a list (empty when there is none)."""
    twins = comparison.a.twin, comparison.b.twin
    for node in _by_end(comparison.a.root):
        match = comparison.match_of(node)
        if match is None:
            continue
        if twins[0] is not None and twins[1] is not None and twins[0].calls and twins[1].calls:
            found = _from_twins(match, twins)
        else:
            found = _from_files(match)
        if found is not None:
            return [found]
    return []


def _by_end(root: Node) -> list[Node]:
    """Every call in the order calls end (children before their parent)."""
    order: list[Node] = []
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(node.children))
    return order


def _from_twins(match, twins) -> PrecisionFinding | None:
    mine, theirs = twins[0].of(match.a), twins[1].of(match.b)
    outputs_b = {p: t for p, t in theirs.items() if p.startswith("out")}
    for place, a in ((p, t) for p, t in mine.items() if p.startswith("out")):
        b = outputs_b.get(place) or next((t for t in outputs_b.values() if t.numel == a.numel), None)
        if b is None:
            continue
        if b.run_out > a.run_out:
            return _finding(match, "non-finite", (
                f"the port's run returned {b.run_out} NaN or infinite values in {match.b.module_path}'s output where "
                f"its float64 twin and the reference's run hold {a.run_out}: its dtype overflowed (a computation the "
                "reference does in a wider dtype, such as x.pow(2) in float16)"))
        if _lost(b) and not _lost(a):
            return _finding(match, "lost", (
                f"the port's run returned {match.b.module_path}'s output with an RMS of {b.run_rms:.3g} where its "
                f"float64 twin's is {b.rms:.3g} (the reference's run: {a.run_rms if a.run_rms is not None else 0:.3g} "
                f"against {a.rms:.3g}): the same function, computed in a dtype that lost the value (an overflow "
                "turned into zeros or a constant)"))
    return None


def _lost(t) -> bool:
    """The run's output is off its float64 twin's size by half of it: by the triangle inequality it is at least
    that far from the twin, which no rounding carries a value."""
    return t.run_rms is not None and t.rms > 0 and abs(t.run_rms - t.rms) >= t.rms / 2


def _from_files(match) -> PrecisionFinding | None:
    outputs_b = [t for io, _, t in match.b.tensors() if io == "output"]
    if not outputs_b or not any(t.nonfinite for t in outputs_b):
        return None
    if any(t.nonfinite for io, _, t in match.a.tensors() if io == "output"):
        return None
    if any(t.has_nan for io, _, t in match.b.tensors() if io == "input"):
        return None
    return _finding(match, "non-finite", (
        f"the port's run produced a NaN or an infinity in {match.b.module_path}'s output where the reference's stays "
        "finite and the port was handed none: its dtype overflowed (a computation the reference does in a wider "
        "dtype, such as x.pow(2) in float16)"))


def _finding(match, rule: str, sentence: str) -> PrecisionFinding:
    return PrecisionFinding(match.a.module_path, match.b.module_path, rule, sentence)
