"""Aligning two operation sequences by value on their float64 runs (the measured ground truth).

Two operations are counterparts when their float64 outputs hold the same values up to layout
(``values.py``) within what rounding in float64 can make of them. That allowance is measured, not assumed:
each operation's accumulated rounding in its own dtype (its output against the float64 run's) scales to
float64 by the ratio of the unit roundoffs, since rounding grows in proportion to the unit roundoff:
``allowed = MATCH_K * (error_a + error_b) * u64 / u + MATCH_FLOOR``. A fused projection's split, a ``view``
for a ``reshape``, a ``repeat_interleave`` for ``expand + reshape`` then align without rules per operation.
Where a value is degenerate (one distinct value: zeros, ones) or matched only as a permutation of its
elements, the alignment says so (``uncertain``, ``permuted``) rather than trusting it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import torch

from ..measure.noise import UNIT_ROUNDOFF
from .record import Operation, OperationRecord
from .shadow import sentinel_limit
from .values import PERMUTED, degenerate, distance, permuted_distance, rms

U64 = UNIT_ROUNDOFF["float64"]
MATCH_K = 16.0  # float64 paths of correct code differ by a few times their scaled rounding
MATCH_FLOOR = 64 * U64  # a few float64 roundings: exact operations still differ by summation order


@dataclass
class Counterpart:
    """A port operation holding the same values as a reference operation."""

    index: int
    distance: float
    layout: str  # "same" or "permuted"


@dataclass
class Alignment:
    """Which operations of the port hold the values of which operations of the reference."""

    u: float  # the unit roundoff of the compared dtype
    of_reference: dict[int, list[Counterpart]] = field(default_factory=dict)
    of_port: dict[int, list[int]] = field(default_factory=dict)
    uncertain_reference: set[int] = field(default_factory=set)
    uncertain_port: set[int] = field(default_factory=set)

    def allowed(self, a: Operation, b: Operation) -> float:
        """The float64 difference rounding allows between ``a`` and ``b`` (relative RMS)."""
        scale = U64 / self.u if self.u > 0 else 1.0
        return MATCH_K * ((a.error or 0.0) + (b.error or 0.0)) * scale + MATCH_FLOOR


def limit_of(op: Operation) -> float:
    """Where the sentinels of the operation's dtype begin (``shadow.sentinel_limit``)."""
    return sentinel_limit(getattr(torch, op.dtype, torch.float64))


def compared(op: Operation) -> bool:
    """Whether an operation's output takes part in the alignment (floating, non-empty, with a float64 twin)."""
    return op.floating and op.low is not None and op.truth is not None and op.truth.numel() > 0


def align_operations(reference: OperationRecord, port: OperationRecord, u: float) -> Alignment:
    """Pair the reference's operations with the port's by their float64 values (see the module's text)."""
    result = Alignment(u)
    ref_ops = [op for op in reference.operations if compared(op)]
    port_ops = [op for op in port.operations if compared(op)]
    for op in ref_ops:
        if degenerate(op.truth, limit_of(op)):
            result.uncertain_reference.add(op.index)
    for op in port_ops:
        if degenerate(op.truth, limit_of(op)):
            result.uncertain_port.add(op.index)
    ranked = sorted((rms(op.truth, limit_of(op)), op.index) for op in port_ops)
    keys = [r for r, _ in ranked]
    by_index = {op.index: op for op in port_ops}
    widest = MATCH_K * 2 * max((op.error or 0.0) for op in ref_ops + port_ops) * (U64 / u if u else 1) + MATCH_FLOOR
    for a in ref_ops:
        size = rms(a.truth, limit_of(a))
        low, high = size * (1 - widest) - 1e-300, size * (1 + widest) + 1e-300
        found: list[Counterpart] = []
        for _, index in ranked[bisect.bisect_left(keys, low):bisect.bisect_right(keys, high)]:
            b = by_index[index]
            limit, edge = result.allowed(a, b), min(limit_of(a), limit_of(b))
            near = distance(a.truth, b.truth, edge)
            if near is None or near[0] > limit:
                near = permuted_distance(a.truth, b.truth, edge)
                if near is None or near[0] > limit or _needs_order(a, b):
                    continue
            found.append(Counterpart(b.index, near[0], near[1]))
            result.of_port.setdefault(b.index, []).append(a.index)
        if found:
            result.of_reference[a.index] = found
            if all(c.layout == PERMUTED for c in found):
                result.uncertain_reference.add(a.index)
    for b, refs in result.of_port.items():
        if all(any(c.index == b and c.layout == PERMUTED for c in result.of_reference[r]) for r in refs):
            result.uncertain_port.add(b)
    return result


def _needs_order(a: Operation, b: Operation) -> bool:
    """A permutation is accepted only between outputs of one size whose shapes hold the same dimensions."""
    return sorted(a.shape) != sorted(b.shape)
