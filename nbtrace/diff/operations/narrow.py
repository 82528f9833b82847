"""The first operation where a port differs from the reference, from two operation records.

Two findings, the earlier in the reference's order wins:

- **math**: the first reference operation (that the module's output depends on) whose float64 value has no
  counterpart among the port's float64 values, and none of whose later consumers regains one (paths that
  part and meet again, as a fused projection and its split, are a different route to the same values, not
  a difference). The port's side is named the same way in the port's order.
- **precision**: the first value both sides compute (counterparts) where the port's rounding in its own
  dtype exceeds ``PRECISION_K`` times the reference's plus ``PRECISION_FLOOR`` roundings (the rule of
  docs: ``e_port <= k * e_ref + floor``); the port's operation named is the earliest one on its way to that
  value whose rounding already exceeds that limit while its inputs' did not (where the rounding was born).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..measure.noise import UNIT_ROUNDOFF
from .align import Alignment, compared, limit_of
from .record import Operation, OperationRecord
from .values import distance

if TYPE_CHECKING:  # pragma: no cover
    import pandas

PRECISION_K = 3.0  # the design's k: a correct port's rounding stays within 3x the reference's
PRECISION_FLOOR = 2.0  # roundings of the compared dtype (an exact operation against one that rounds once)


@dataclass
class OperationDivergence:
    """The first operation where the port differs: ``kind`` is ``"math"`` (its float64 value has no
    counterpart) or ``"precision"`` (the same value, rounded far more); ``reference`` and ``port`` are the
    operations on each side (None where a side has none to name); ``difference`` and ``allowed`` are relative
    RMS (math: of the float64 values; precision: of each side's rounding), ``u`` the compared dtype's unit
    roundoff."""

    kind: str
    reference: Operation | None
    port: Operation | None
    difference: float | None
    allowed: float | None
    u: float

    def __str__(self) -> str:
        from ...render.operations_words import divergence_sentence

        return divergence_sentence(self)


@dataclass
class OperationDiff:
    """Two operation records of one call aligned, and the first operation where they differ (``first``,
    None when the port computes what the reference does within rounding). With only the port live,
    ``reference`` and ``alignment`` are None and ``note`` says how far the port's own record narrows it."""

    reference: OperationRecord | None
    port: OperationRecord
    alignment: Alignment | None
    first: OperationDivergence | None
    module_path: str | None = None  # the call narrowed, in the reference's naming (from a comparison)
    note: str | None = None

    @property
    def u(self) -> float:
        """The unit roundoff of the compared dtype (the coarser side's)."""
        if self.alignment is not None:
            return self.alignment.u
        return UNIT_ROUNDOFF.get(self.port.dtype, UNIT_ROUNDOFF["float64"])

    def status(self, side: str, index: int) -> str:
        """``"agrees"``, ``"differs"`` (the first divergence), ``"uncertain"`` or ``"only"`` (no counterpart)
        for operation ``index`` of ``side`` (``"reference"`` or ``"port"``)."""
        first = self.first
        named = getattr(first, side) if first else None
        if named is not None and named.index == index:
            return "differs"
        if self.alignment is None:
            return "only"
        uncertain = self.alignment.uncertain_reference if side == "reference" else self.alignment.uncertain_port
        if index in uncertain:
            return "uncertain"
        paired = self.alignment.of_reference if side == "reference" else self.alignment.of_port
        return "agrees" if index in paired else "only"

    def to_dataframe(self) -> pandas.DataFrame:
        """One row per operation of both sides: side, index, name, module, source line, shape, dtype, status,
        rounding and counterparts."""
        from ...render.operations_frame import operations_frame

        return operations_frame(self)

    def __str__(self) -> str:
        from ...render.operations_words import diff_summary

        return diff_summary(self)


def _consumers(record: OperationRecord) -> list[list[int]]:
    found: list[list[int]] = [[] for _ in record.operations]
    for op in record.operations:
        for i in op.inputs:
            found[i].append(op.index)
    return found


def _first_unmatched(record: OperationRecord, matched: set[int], uncertain: set[int]) -> Operation | None:
    """The first operation the output depends on, with no counterpart, none of whose consumers regains one."""
    ops, consumers = record.operations, _consumers(record)
    regains = [False] * len(ops)
    for op in reversed(ops):
        regains[op.index] = any(
            (c in matched and c not in uncertain) or regains[c] for c in consumers[op.index]
        )
    for op in ops:
        if (op.reaches_output and compared(op) and op.index not in matched and op.index not in uncertain
                and not regains[op.index]):
            return op
    return None


def _born(record: OperationRecord, start: Operation, limit: float) -> Operation:
    """The earliest operation on the way to ``start`` whose rounding exceeds ``limit`` while its inputs' do not."""
    ops, seen, todo, born = record.operations, set(), [start.index], start
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        op = ops[i]
        if (op.error or 0.0) > limit:
            if op.index < born.index:
                born = op
            todo.extend(op.inputs)
    return born


def _precision(reference: OperationRecord, port: OperationRecord, alignment: Alignment) -> OperationDivergence | None:
    u = alignment.u
    for a in reference.operations:
        pairs = alignment.of_reference.get(a.index)
        if not pairs or not a.reaches_output or a.index in alignment.uncertain_reference:
            continue
        twins = [port.operations[c.index] for c in pairs]
        family = {r for c in pairs for r in alignment.of_port.get(c.index, [])} | {a.index}
        e_ref = max((reference.operations[r].error or 0.0) for r in family)
        e_port = max((b.error or 0.0) for b in twins)
        limit = PRECISION_K * e_ref + PRECISION_FLOOR * u
        if e_port > limit:
            worst = max(twins, key=lambda b: b.error or 0.0)
            return OperationDivergence("precision", a, _born(port, worst, limit), e_port, limit, u)
    return None


def narrow_records(reference: OperationRecord, port: OperationRecord, alignment: Alignment) -> OperationDiff:
    """The first diverging operation of two aligned records (see the module's text)."""
    ref_first = _first_unmatched(reference, set(alignment.of_reference), alignment.uncertain_reference)
    port_first = _first_unmatched(port, set(alignment.of_port), alignment.uncertain_port)
    precise = _precision(reference, port, alignment)
    first = precise
    if ref_first is not None and (precise is None or ref_first.index <= precise.reference.index):
        first = _math(ref_first, port_first, alignment)
    elif ref_first is None and precise is None and port_first is not None:
        first = _math(None, port_first, alignment)
    return OperationDiff(reference, port, alignment, first)


def _math(a: Operation | None, b: Operation | None, alignment: Alignment) -> OperationDivergence:
    difference = allowed = None
    if a is not None and b is not None:
        near = distance(a.truth, b.truth, min(limit_of(a), limit_of(b)))
        if near is not None:
            difference, allowed = near[0], alignment.allowed(a, b)
    return OperationDivergence("math", a, b, difference, allowed, alignment.u)
