"""Rounding measured as a trace was recorded, and the numerics of the run: two sections of the sidecar.

``nbtrace.trace(model, ..., measure_rounding=True)`` re-runs calls in float64 as it records
(``capture/rounding.py``) and writes, per recorded float output tensor of a call, four RMS numbers
(absolute, over the finite elements) into the sidecar section ``rounding``::

    {"mode": "all" | "leaves",
     "calls": {"<call name>": {"<place>": {"own": x, "acc": x, "scale": x, "one": x, "reason": "..."}}}}

A call name is ``core.ranks.call_key(module path, call index)``, a place is ``out``, ``out.0``,
``out.logits`` as ``core.node.leaf_places`` names it. ``own`` = RMS(y - F64(x)): the call's own
rounding on its own inputs; ``acc`` = RMS(y - T), T the same call in one float64 forward of the whole
model: the rounding accumulated up to that tensor; ``scale`` = RMS(F64(x)) (RMS(T) where only ``acc``
was measured); ``one`` = RMS(F64(x) - F64(x) rounded to y's dtype). A number is null where it could
not be measured, and ``reason`` says why. Loaded as ``node.measured`` (place -> ``Measured``) and
``trace.measured_rounding``.

The section ``numerics`` (always written) says what the run computed with: TF32 flags, float32 matmul
precision, the enabled attention backends, autocast, deterministic algorithms, the devices of the
parameters and the torch version (``capture/numerics.py``); loaded as ``trace.numerics``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import TraceFormatError
from .ranks import call_key
from .sidecar import sidecar_path

if TYPE_CHECKING:  # pragma: no cover
    from .trace import Trace

ROUNDING_SECTION = "rounding"
NUMERICS_SECTION = "numerics"
MODES = ("all", "leaves")
FIELDS = ("own", "acc", "scale", "one")


@dataclass(frozen=True)
class Measured:
    """The rounding of one recorded output tensor, measured against float64 (RMS norms; None: not measured).

    ``own``: this call's own rounding on its own inputs; ``acc``: what the run accumulated up to this
    tensor; ``scale``: the RMS of the float64 result; ``one``: one rounding of that result to the
    tensor's dtype. ``reason`` says why a number is missing (None when nothing is).
    """

    own: float | None = None
    acc: float | None = None
    scale: float | None = None
    one: float | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the sidecar holds for this tensor."""
        out: dict[str, Any] = {name: getattr(self, name) for name in FIELDS}
        if self.reason:
            out["reason"] = self.reason
        return out


class _Bad(ValueError):
    pass


def _number(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise _Bad(f"{what} must be a finite number >= 0 or null, got {value!r}")
    return float(value)


def _one(raw: Any, where: str) -> Measured:
    if not isinstance(raw, dict):
        raise _Bad(f"{where} must be an object, got {type(raw).__name__}")
    reason = raw.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise _Bad(f"{where}.reason must be a string, got {reason!r}")
    numbers = [_number(raw.get(name), f"{where}.{name}") for name in FIELDS]
    return Measured(*numbers, reason=reason)


def parse_rounding(section: Any) -> tuple[str, dict[str, dict[str, Measured]]]:
    """``(mode, {call name: {place: Measured}})`` from a ``rounding`` section; ValueError naming what is wrong."""
    if not isinstance(section, dict):
        raise _Bad(f"must be an object, got {type(section).__name__}")
    mode = section.get("mode")
    if mode not in MODES:
        raise _Bad(f"'mode' must be one of {', '.join(MODES)}, got {mode!r}")
    calls = section.get("calls", {})
    if not isinstance(calls, dict):
        raise _Bad(f"'calls' must be an object, got {type(calls).__name__}")
    parsed: dict[str, dict[str, Measured]] = {}
    for name, places in calls.items():
        if not isinstance(places, dict):
            raise _Bad(f"calls[{name!r}] must be an object of places, got {type(places).__name__}")
        parsed[name] = {place: _one(raw, f"calls[{name!r}][{place!r}]") for place, raw in places.items()}
    return mode, parsed


def attach_measured(trace: Trace) -> None:
    """Give every node of ``trace`` its ``measured`` numbers from the sidecar (``{}`` where there are none).

    A malformed section is a TraceFormatError naming the sidecar.
    """
    section = trace.sidecar.get(ROUNDING_SECTION)
    if section is None:
        return
    try:
        _, calls = parse_rounding(section)
    except _Bad as bad:
        where = sidecar_path(trace.source) if trace.source is not None else "<recorded trace>"
        raise TraceFormatError(where, f"bad '{ROUNDING_SECTION}' section: {bad}") from None
    for node in trace.nodes():
        node.measured = calls.get(call_key(node.module_path, node.call_index), {})


def rounding_mode(trace: Trace) -> str | None:
    """``"all"`` or ``"leaves"`` when ``trace`` was recorded with ``measure_rounding``, else None."""
    section = trace.sidecar.get(ROUNDING_SECTION)
    return section.get("mode") if isinstance(section, dict) else None
