"""The float64 twin a trace recorded: the sidecar section ``twin``, read as ``trace.twin``.

``nbtrace.trace(model, ...)`` (``measure_rounding`` "twin", the default where the model's float64 copy fits, or
``True``) runs the whole model once more in float64 from the same top-level inputs, float64 through the model's
own casts (``capture/twin/``), and keeps at every call a fingerprint of each float input and output of that
twin: 16 random-sign sums of its values (``capture/twin/fingerprint.py``). Two twins from the same inputs are two
float64 functions; the RMS of their difference at a call is estimated from the fingerprints alone::

    {"version": 1, "sums": 16, "padding": "<digest of the padding mask>" | null, "padding_from": "<its place>",
     "constants": ["<dtype>:<shape>:<digest>", ...], "skipped": "<why no twin was recorded>" (only then),
     "calls": {"<call name>": {"<place>": {"shape": [..], "p": "<base64 of 16 float64>",
                                             "n": kept, "rms": x, "out": k, "s64": x, "sconst": x, "low": "...",
                                             "acc": x, "run_rms": x, "run_out": k}}}}

``padding`` is the ``(batch, seq)`` padding mask's shape and two sums of it (``"[2, 7]:c:4f"``), null where the run had
no mask or one of all ones (it left nothing out); ``padding_from`` the top-level input it was found at
(``capture/twin/padding.py``). Calls pruning left out of the files are kept too, and ``events`` then lists every
call's start (``"(" + name``) and end (``")" + name``) in the order the twin made them, so a verdict can name a
module inside pruned layers.
``n`` elements were kept (padding rows, NaNs and sentinels left out: ``out`` of them), ``rms`` is their RMS;
``acc`` the RMS of what the run itself returned there against the twin (the rounding it accumulated, estimated
from the fingerprints; outputs only), ``run_rms`` the RMS of the run's output (exact), ``run_out`` how many NaN,
infinite or sentinel values the run's output held beyond the twin's;
``s64`` how far the
twin moved when every stored float tensor moved by one float64 rounding (the twin's own precision, measured),
``sconst`` when the float constants the model holds outside its ``state_dict`` moved by one rounding of their
dtype (null: the model holds none); ``low`` names the first operation that stayed narrower than float64 before
the call ended (the twin is not float64 there). ``constants`` digests those constants, so two sides with equal
lists computed them bit for bit. ``q`` (a tensor of three or more axes longer than one): its ``AXES`` layout sums,
each element signed by the product of its axes' signs, the same whatever order the axes are held in, so a
tensor held channels last compares with its channels-first counterpart (``distance(..., layout=True)``).
"""

from __future__ import annotations

import base64
import math
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import TraceFormatError
from .ranks import call_key
from .sidecar import sidecar_path

if TYPE_CHECKING:  # pragma: no cover
    from .node import Node
    from .trace import Trace

TWIN_SECTION = "twin"
TWIN_VERSION = 1
SUMS = 16
AXES = 8  # the layout sums of a tensor (``capture/twin/signs.py``'s ``AXIS_SUMS``)


@dataclass(frozen=True)
class TwinPrint:
    """The fingerprint of one float tensor of a call's float64 twin (see the module docstring)."""

    shape: tuple[int, ...]
    sums: tuple[float, ...]
    kept: int
    rms: float
    left_out: int = 0
    s64: float | None = None
    sconst: float | None = None
    low: str | None = None
    acc: float | None = None  # the RMS of the run's own output against this twin: the rounding it accumulated
    run_out: int = 0  # NaN, inf or sentinels in the run's output beyond the twin's
    run_rms: float | None = None  # the RMS of the run's own output (exact: its sum of squares)
    #: the sums of the same tensor in the twin run with the model and its float inputs rounded to bfloat16
    bf16: tuple[float, ...] | None = None
    #: the layout sums (``q``; None: fewer than three axes longer than one), and the same in the rounded run
    layout: tuple[float, ...] | None = None
    layout_bf16: tuple[float, ...] | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def distance(self, other: TwinPrint, rounded: bool = False, layout: bool = False) -> float:
        """The RMS of the difference of the two tensors (an estimate from the sums); ``rounded``: this tensor's sums
        in the twin run with the model rounded to bfloat16 (``bf16``) against ``other``'s; ``layout``: from the
        layout sums, which compare the tensors whatever order each holds its axes in (each of them estimates the
        squared difference on its own: their mean is the estimate)."""
        if layout:
            mine = self.layout_bf16 if rounded and self.layout_bf16 is not None else self.layout
            if mine is None or other.layout is None:
                return math.nan
            return math.sqrt(sum((x - y) ** 2 for x, y in zip(mine, other.layout)) / len(mine) / self.kept)
        sums = self.bf16 if rounded and self.bf16 is not None else self.sums
        return math.sqrt(sum((x - y) ** 2 for x, y in zip(sums, other.sums)) / self.kept)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"shape": list(self.shape),
                               "p": base64.b64encode(struct.pack(f"<{SUMS}d", *self.sums)).decode("ascii"),
                               "n": self.kept, "rms": self.rms}
        if self.left_out:
            out["out"] = self.left_out
        if self.run_out:
            out["run_out"] = self.run_out
        for name in ("s64", "sconst", "low", "acc", "run_rms"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.bf16 is not None:
            out["p_bf16"] = base64.b64encode(struct.pack(f"<{SUMS}d", *self.bf16)).decode("ascii")
        for name, sums in (("q", self.layout), ("q_bf16", self.layout_bf16)):
            if sums is not None:
                out[name] = base64.b64encode(struct.pack(f"<{AXES}d", *sums)).decode("ascii")
        return out


@dataclass
class Twin:
    """A trace's twin section: fingerprints per call name and place, and what both sides must share."""

    calls: dict[str, dict[str, TwinPrint]]
    padding: str | None = None
    constants: tuple[str, ...] = ()
    skipped: str | None = None
    #: where pruning left calls out of the files: every call's start ``"(" + name`` and end ``")" + name``, in order
    events: tuple[str, ...] = ()
    padding_from: str | None = None  # the top-level input the padding mask was found at

    @property
    def padded(self) -> tuple[list[int], int] | None:
        """The padding mask's shape and how many positions it leaves out, or None: no padding (no mask, or an
        older file's mask of all ones, which leaves nothing out)."""
        if self.padding is None:
            return None
        try:
            shape_text, plain = self.padding.split(":")[:2]
            shape = [int(d) for d in shape_text.strip("[]").split(",") if d.strip()]
            left_out = math.prod(shape) - int(plain, 16)
        except ValueError:
            return [], -1  # not a digest this nbtrace reads: it compares as its text only
        return (shape, left_out) if left_out else None

    def of(self, node: Node) -> dict[str, TwinPrint]:
        """Place -> fingerprint of one call (empty when the twin did not see it)."""
        return self.calls.get(call_key(node.module_path, node.call_index), {})


class _Bad(ValueError):
    pass


_OPTIONAL = ("s64", "sconst", "acc", "run_rms")
_COUNTS = ("out", "run_out")
_UNPACK = struct.Struct(f"<{SUMS}d").unpack
_UNPACK_AXES = struct.Struct(f"<{AXES}d").unpack
_INF = float("inf")


def _print(raw: Any, where: str) -> TwinPrint:
    """One place's fingerprint; ``_Bad`` naming ``where`` and what is wrong. (Read ~10^5 times for a large trace:
    the usual case is checked in a few comparisons, the message written only when one fails.)"""
    try:
        shape = raw["shape"]
        sums = _UNPACK(base64.b64decode(raw["p"], validate=True))
        kept, rms = raw.get("n", 0), raw.get("rms", 0.0)
        optional = [raw.get(name) for name in _OPTIONAL]
        counts = [raw.get(name, 0) for name in _COUNTS]
        low = raw.get("low")
        bf16 = _UNPACK(base64.b64decode(raw["p_bf16"], validate=True)) if "p_bf16" in raw else None
        layout = [_UNPACK_AXES(base64.b64decode(raw[name], validate=True)) if name in raw else None
                  for name in ("q", "q_bf16")]
    except (KeyError, TypeError, AttributeError, ValueError, struct.error):
        raise _Bad(f"{where} must hold 'shape' and 'p' (base64 of {SUMS} float64 numbers; 'q': of {AXES})") from None
    numbers = [kept, rms, *counts, *(v for v in optional if v is not None)]
    if (type(shape) is not list or any(type(d) is not int or d < 0 for d in shape)
            or any(type(v) not in (int, float) or not 0 <= v < _INF for v in numbers)
            or any(not -_INF < v < _INF for v in sums + (bf16 or ()) + (layout[0] or ()) + (layout[1] or ()))
            or (low is not None and type(low) is not str)):
        raise _Bad(f"{where} holds a malformed value (sizes, finite numbers >= 0, 'low' a string)")
    return TwinPrint(tuple(shape), sums, int(kept), float(rms), int(counts[0]), optional[0], optional[1], low,
                     optional[2], int(counts[1]), optional[3], bf16, layout[0], layout[1])


def parse_twin(section: Any) -> Twin:
    """The ``Twin`` of a ``twin`` section; ValueError naming what is wrong."""
    if not isinstance(section, dict):
        raise _Bad(f"must be an object, got {type(section).__name__}")
    version = section.get("version")
    if not isinstance(version, int) or version > TWIN_VERSION:
        raise _Bad(f"has version {version!r}; this nbtrace reads up to {TWIN_VERSION}")
    if section.get("sums", SUMS) != SUMS:
        raise _Bad(f"holds {section.get('sums')!r} sums per tensor; this nbtrace reads {SUMS}")
    calls = section.get("calls", {})
    if not isinstance(calls, dict):
        raise _Bad(f"'calls' must be an object, got {type(calls).__name__}")
    parsed = {}
    for name, places in calls.items():
        if not isinstance(places, dict):
            raise _Bad(f"calls[{name!r}] must be an object of places")
        parsed[name] = {place: _print(raw, f"calls[{name!r}][{place!r}]") for place, raw in places.items()}
    constants = section.get("constants", [])
    if not isinstance(constants, list) or not all(isinstance(c, str) for c in constants):
        raise _Bad("'constants' must be a list of strings")
    for key in ("padding", "skipped", "padding_from"):
        if section.get(key) is not None and not isinstance(section.get(key), str):
            raise _Bad(f"'{key}' must be a string or null")
    events = section.get("events", [])
    if not isinstance(events, list) or not all(isinstance(e, str) and e[:1] in ("(", ")") for e in events):
        raise _Bad("'events' must be a list of strings starting with '(' or ')'")
    return Twin(parsed, section.get("padding"), tuple(constants), section.get("skipped"), tuple(events),
                section.get("padding_from"))


def twin_of(trace: Trace) -> Twin | None:
    """The trace's twin (parsed once), or None when it was recorded without one; a malformed section is a
    TraceFormatError naming the sidecar."""
    section = trace.sidecar.get(TWIN_SECTION)
    if section is None:
        return None
    try:
        return parse_twin(section)
    except _Bad as bad:
        where = sidecar_path(trace.source) if trace.source is not None else "<recorded trace>"
        raise TraceFormatError(where, f"bad '{TWIN_SECTION}' section: {bad}") from None
