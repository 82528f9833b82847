"""The rounding a trace measured as it was recorded (``trace(..., measure_rounding=True)``), read per tensor.

The capture stores, per recorded output place of a call, ``Measured(own, acc, scale, one)`` on
``node.measured`` (``core/measured.py``). A tensor a call merely hands on (the next call's input)
holds the values some call's output had: its measurement is that call's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ...core.node import Node
    from ..align.flow import Flow, Slot


def measured_of(node: Node) -> dict[str, Any]:
    """``place -> Measured`` of one call (empty when its trace measured nothing)."""
    return getattr(node, "measured", None) or {}


def measured_at(flow: Flow, slot: Slot) -> Any | None:
    """The measurement of the values at ``slot``: of the output place that made them (the slot itself, the slot
    they first appeared in, a copy, or the call whose own code after its children made them), or None."""
    for place in (slot, slot.source, *flow.copies(slot)):
        if place.io == "output":
            found = measured_of(place.node).get(place.arg)
            if found is not None:
                return found
    producer = slot.source.producer
    if producer is not None and producer.kind == "after":
        return measured_of(producer.node).get("out")
    return None


def accumulated(flow: Flow, slot: Slot) -> tuple[float, float] | None:
    """``(acc, scale)`` at ``slot`` when both were measured, else None."""
    found = measured_at(flow, slot)
    acc = getattr(found, "acc", None)
    if acc is None:
        return None
    return acc, getattr(found, "scale", None) or 0.0
