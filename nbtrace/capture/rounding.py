"""Rounding measured as it is recorded: ``nbtrace.trace(model, ..., measure_rounding=True | "leaves")``.

For each measured call of module F with inputs x and recorded output y (dtype d):

- ``own`` = RMS(y - F64(x)): F copied to float64 (``float64.py``) and run on a float64 copy of the
  inputs it was given, taken *before* the call (a KV cache the call appends to is copied as it was),
  right after the call returns (so y has not been changed in place yet);
- ``scale`` = RMS(F64(x)), ``one`` = RMS(F64(x) - F64(x) rounded to d);
- ``acc`` = RMS(y - T) (``measure_rounding=True`` only): T the same call's output in one float64
  forward of the whole model on the same top-level inputs (``shadow.py``), after the forward.

``"leaves"`` measures ``own`` of the calls of modules without submodules; ``True`` of every call, plus
``acc``. Every mode (and ``"twin"``, which measures nothing per call) also records the float64 twin of the
whole forward (``twin/record.py``: fingerprints of every call's float64 twin, the sidecar's ``twin`` section).
Nothing of this runs when the option is off: ``context.py`` then wraps forwards without it.
A call that cannot run in float64 gets null numbers and the reason, never an exception; the user's
modules, inputs, flags and random state are left as they were. The numbers are computed on the
device and reach the host with the forward's one transfer; ``section`` turns them into the sidecar's
``rounding`` section (``core/measured.py``), keyed by the calls of the tree as it was written (after
pruning).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..core.measured import Measured
from .recorded import named_calls
from .rounding_numbers import ROOT, describe, float_leaves, mismatch, own_numbers
from .shadow import shadow_forward
from .speculate import Site
from .transfer import HostBatch, Slot
from .twin.copies import float64_copy
from .twin.numerics import float64_twin
from .twin.record import TwinNumbers, TwinRecorder, TwinStart
from .twin.values import upcast

if TYPE_CHECKING:  # pragma: no cover
    from .recorder import Recorder, _ForwardRun

MODES = (False, True, "leaves", "twin", "auto")


def check_mode(measure_rounding: Any) -> str | None:
    """``"all"``, ``"leaves"``, ``"twin"``, ``"auto"`` or None (off) for the ``measure_rounding`` argument;
    ValueError otherwise."""
    if measure_rounding is False or measure_rounding is None:
        return None
    if measure_rounding is True:
        return "all"
    if isinstance(measure_rounding, str) and measure_rounding in ("leaves", "twin", "auto"):
        return measure_rounding
    raise ValueError(f"measure_rounding must be one of {', '.join(map(repr, MODES))}, got {measure_rounding!r}")


class Pending:
    """What is measured of one recorded output tensor: slots of numbers still on their way, and reasons."""

    __slots__ = ("acc", "own", "reasons")

    def __init__(self) -> None:
        self.own: Slot | None = None  # [own, scale, one]
        self.acc: Slot | None = None  # [acc, scale of T]
        self.reasons: list[str] = []

    def measured(self) -> Measured:
        own = self.own.values() if self.own is not None else [None] * 3
        acc = self.acc.values() if self.acc is not None else [None] * 2
        scale = own[1] if own[1] is not None else acc[1]
        numbers = [_plain(v) for v in (own[0], acc[0], scale, own[2])]
        return Measured(*numbers, reason="; ".join(self.reasons) or None)


def _plain(value: float | None) -> float | None:
    if value is None or value != value or value in (float("inf"), float("-inf")):
        return None
    return float(f"{value:.7g}")


class Measures:
    """The measurements of one top-level forward."""

    def __init__(self, meter: RoundingMeter, run: _ForwardRun) -> None:
        self.meter = meter
        self.run = run
        self.batch: HostBatch = run.serialize.batch
        #: id of a call's JSON node (ROOT for the root) -> place -> Pending
        self.calls: dict[int, dict[str, Pending]] = {}
        #: call name while recording -> (node id, [(place, output, version)]) for the float64 forward (acc)
        self.kept: dict[str, tuple[int, list[tuple[str, torch.Tensor, int | None]]]] = {}
        #: the float64 twin of this forward's root: the model's, or that of the module the forward is rooted at
        self.twin: TwinRecorder = meter.twin
        self.twin_start: TwinStart | None = None
        self.twin_numbers: TwinNumbers | None = None

    def tensor(self, node: int, place: str) -> Pending:
        return self.calls.setdefault(node, {}).setdefault(place, Pending())

    def own(self, node: int, module: nn.Module, out: Any, inputs: tuple[tuple, dict] | None, problem: str | None,
            key: str) -> None:
        """Measure one call's own rounding: its module in float64 on its own inputs, against ``out``."""
        leaves = float_leaves(out)
        if not leaves:
            return
        if self.meter.mode == "all":
            self.kept[key] = (node, [(place, y, _version(y)) for place, y in leaves])
        if inputs is None:
            for place, _ in leaves:
                self.tensor(node, place).reasons.append(f"own: {problem}")
            return
        try:
            with self.meter.paused(), float64_twin():
                wide = float64_copy(module)
                result = float_leaves(wide.forward(*inputs[0], **inputs[1]))
                del wide
            self.note_own(node, leaves, dict(result))
        except Exception as exc:  # noqa: BLE001 - a module that cannot run in float64 must not cost the trace
            for place, _ in leaves:
                self.tensor(node, place).reasons.append(f"own: could not run in float64 ({describe(exc)})")

    def note_own(self, node: int, leaves: list[tuple[str, torch.Tensor]], result: dict[str, torch.Tensor]) -> None:
        for place, y in leaves:
            entry = self.tensor(node, place)
            z = result.get(place)
            problem = mismatch(y, z)
            if problem is not None:
                entry.reasons.append(f"own: {problem}")
            else:
                entry.own = self.batch.add(own_numbers(y, z))

    def section(self, root: dict[str, Any]) -> dict[str, Any]:
        """The ``rounding`` section for the tree as written (``root``, after pruning): call name -> place -> numbers."""
        calls: dict[str, dict[str, Any]] = {}
        for key, raw in named_calls(root):
            places = self.calls.get(ROOT if raw is root else id(raw))
            if places:
                calls[key] = {place: t.measured().to_dict() for place, t in places.items()}
        return {"mode": self.meter.mode, "calls": calls}

    def twin_section(self, root: dict[str, Any]) -> dict[str, Any]:
        """The sidecar's ``twin`` section for the tree as written."""
        return self.twin.section(self.twin_numbers, root)


def _version(tensor: torch.Tensor) -> int | None:
    """The tensor's version counter (None for an inference tensor, which has none)."""
    return None if tensor.is_inference() else tensor._version


class RoundingMeter:
    """Measures rounding for a Recorder: wraps its module calls, and its top-level forwards."""

    def __init__(self, recorder: Recorder, mode: str, padding_mask: str | bool | None = None) -> None:
        self.recorder = recorder
        self.mode = mode
        self.twin = TwinRecorder(recorder.model, recorder.class_name, keep_inputs=recorder.use_repr,
                                 padding_mask=padding_mask)
        #: the twins of the model's modules that run forwards of their own (``Recorder.call_outside``), by path
        self._outside: dict[str, TwinRecorder] = {}

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Nothing the float64 copies run is recorded (a stray call of a user's module passes through)."""
        recorder = self.recorder
        run, recorder._run = recorder._run, None
        try:
            yield
        finally:
            recorder._run = run

    def call_module(self, site: Site, module: nn.Module, forward: Callable, args: tuple, kwargs: dict[str, Any]) -> Any:
        """A wrapped module call: recorded as always, then measured."""
        __tracebackhide__ = True
        recorder = self.recorder
        run = recorder._run
        measures = run.rounding if run is not None else None
        if measures is None:
            return recorder.call_module(site, forward, args, kwargs)
        count = run.calls.get(site.path, 0) + 1
        key = site.path if count == 1 else f"{site.path}@{count}"
        if self.mode == "twin" or (self.mode == "leaves" and site.has_children):
            out = recorder.call_module(site, forward, args, kwargs)
            measures.twin.note_run(measures.twin_start, key, out, measures.batch)
            return out
        inputs, problem = _snapshot(args, kwargs)
        out = recorder.call_module(site, forward, args, kwargs)
        measures.twin.note_run(measures.twin_start, key, out, measures.batch)
        node = _last_closed(run, site.path)
        if node is not None:
            try:
                measures.own(id(node), module, out, inputs, problem, key)
            except Exception as exc:  # noqa: BLE001 - measuring must never cost the user their forward
                measures.tensor(id(node), "out").reasons.append(f"own: not measured ({describe(exc)})")
        return out

    def start(self, run: _ForwardRun, args: tuple, kwargs: dict[str, Any], module: nn.Module | None) -> Measures:
        """A top-level forward begins: its measurements, and float64 copies of its inputs for the twin of the
        module it runs (the model, or one of its modules called outside the model's forward)."""
        measures = run.rounding = Measures(self, run)
        if module is not None and module is not self.recorder.model:
            twin = self._outside.get(run.root)
            if twin is None:
                twin = self._outside[run.root] = TwinRecorder(  # a declared name is the model's argument
                    module, run.root, keep_inputs=self.recorder.use_repr,
                    padding_mask=False if self.twin.padding_mask is False else None)
            twin.skipped = self.twin.skipped  # too large for a float64 copy: its modules too
            if self.twin.ranks is not None:  # the other ranks never run this one's twin: it would wait for them
                twin.skipped = "a module called outside the model's forward under several ranks"
            measures.twin = twin
        with self.paused():
            measures.twin_start = measures.twin.start(args, kwargs)
        return measures

    def top_done(self, measures: Measures, out: Any) -> None:
        """The top-level forward returned ``out``: run the whole model's twin in float64 (``shadow.py``)."""
        measures.twin.note_run(measures.twin_start, measures.run.root, out, measures.batch)
        try:
            with self.paused():
                shadow_forward(self, measures, out)
        except Exception as exc:  # noqa: BLE001 - measuring must never cost the user their forward
            measures.tensor(ROOT, "out").reasons.append(f"not measured ({describe(exc)})")


def _snapshot(args: tuple, kwargs: dict[str, Any]) -> tuple[tuple[tuple, dict] | None, str | None]:
    """A float64 copy of a call's arguments, or None and why it could not be made."""
    try:
        return upcast((args, kwargs)), None
    except Exception as exc:  # noqa: BLE001 - an input that cannot be copied leaves the call unmeasured
        return None, f"its inputs could not be copied to float64 ({describe(exc)})"


def _last_closed(run: _ForwardRun, path: str) -> dict[str, Any] | None:
    """The JSON node of the call that just returned (the last child of the call still open)."""
    if not run.frames:
        return None
    children = run.frames[-1].node.get("children") or []
    node = children[-1] if children else None
    return node if node is not None and node.get("module_path") == path else None
