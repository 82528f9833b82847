"""A sketch of every call's float tensors as the run itself computed them: the sidecar's ``sketch`` section.

A trace recorded without its float64 twin (``measure_rounding=False``, transformers' drop-in) holds, for printed
values, only their corners; two such folders cannot tell how far a call's inputs and outputs differ. The sketch
keeps, for each float input and output of every call (calls pruning leaves out of the files too), the twin's
fingerprint (``twin/fingerprint.py``: 16 random-sign sums, the count of kept elements, their sum of squares, the
count left out) of the run's own tensor, padding rows left out. Two folders' sketches then give at every call an
estimate of ``‖x_b − x_a‖`` (the 16 sums' difference: its expected sum of squares is ``‖Δ‖²``), the exact norms of
both sides, and whether the two tensors are the same bit for bit (``diff/verdict/sketch_verdict.py``).

Each distinct tensor is sketched once per forward (a call's input is mostly an earlier call's output); an in-place
change makes it new again. The numbers join the forward's one transfer (``HostBatch``), nothing is read back during
the forward. A tensor that cannot be sketched is left out, never an exception.
"""

from __future__ import annotations

import inspect
import math
import weakref
from typing import TYPE_CHECKING, Any

import torch

from ..core.sketch import SKETCH_VERSION
from ..core.twin import SUMS, TwinPrint
from .recorded import named_calls
from .twin.fingerprint import fingerprint
from .twin.forward import find_valid
from .twin.print_numbers import padding_text

if TYPE_CHECKING:  # pragma: no cover
    from .transfer import HostBatch, Slot

#: the fingerprint's layout sums are not needed here (a sketch compares with the same call's in another folder)
_NO_LAYOUT = {"layout": False} if "layout" in inspect.signature(fingerprint).parameters else {}
_MAX_DEPTH = 16


class RunSketch:
    """The sketches of one top-level forward, on their way to the host."""

    def __init__(self, batch: HostBatch, args: tuple, kwargs: dict[str, Any]) -> None:
        self.batch = batch
        self.valid: torch.Tensor | None = None
        try:
            self.valid = find_valid(args, kwargs).valid
        except Exception:  # noqa: BLE001 - no padding mask found: every position is kept
            self.valid = None
        self.padding: tuple[list[int], Slot] | None = None
        if self.valid is not None:
            flags = self.valid.detach().reshape(-1).to(torch.int64)
            weights = torch.arange(flags.numel(), device=flags.device) % 65521 + 1
            self.padding = list(self.valid.shape), batch.add(torch.stack([flags.sum(), (flags * weights).sum()]))
        self.calls: dict[str, dict[str, tuple[tuple[int, ...], Slot]]] = {}
        self.events: list[str] = []
        self._seen: dict[int, tuple[Any, Slot, int | None]] = {}

    def enter(self, key: str, args: tuple, kwargs: dict[str, Any]) -> None:
        """A call starts: its float inputs, sketched before its code can change them in place."""
        self.events.append("(" + key)
        found: dict[str, tuple[tuple[int, ...], Slot]] = {}
        for i, value in enumerate(args):
            self._walk(value, f"args.{i}", found, 0)
        for name, value in kwargs.items():
            self._walk(value, f"kwargs.{name}", found, 0)
        self.calls[key] = found

    def leave(self, key: str, out: Any) -> None:
        """A call returned ``out``: its float outputs."""
        self.events.append(")" + key)
        found = self.calls.setdefault(key, {})
        self._walk(out, "out", found, 0)

    def _walk(self, value: Any, place: str, found: dict, depth: int) -> None:
        if depth > _MAX_DEPTH:
            return
        if type(value) is torch.Tensor or isinstance(value, torch.Tensor) and not hasattr(value, "placements"):
            if value.is_floating_point() and value.numel() > 0 and not value.is_meta \
                    and value.layout == torch.strided:
                slot = self._sketch(value)
                if slot is not None:
                    found[place] = (tuple(value.shape), slot)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                self._walk(item, f"{place}.{i}", found, depth + 1)
        elif isinstance(value, dict):
            for name, item in value.items():
                self._walk(item, f"{place}.{name}", found, depth + 1)

    def _sketch(self, tensor: torch.Tensor) -> Slot | None:
        version = _version(tensor)
        entry = self._seen.get(id(tensor))
        if entry is not None and entry[0]() is tensor and entry[2] == version and version is not None:
            return entry[1]
        try:
            slot = self.batch.add(fingerprint(tensor, self.valid, **_NO_LAYOUT)[:SUMS + 3])
        except Exception:  # noqa: BLE001 - a tensor that cannot be sketched is left out
            return None
        self._seen[id(tensor)] = (weakref.ref(tensor), slot, version)
        return slot

    def section(self, root: dict[str, Any]) -> dict[str, Any]:
        """The sidecar's ``sketch`` section (after the forward's transfer), for the tree as written (``root``):
        every call sketched, and the calls' order (``events``) where pruning left some out of the files."""
        self._seen = {}
        section: dict[str, Any] = {"version": SKETCH_VERSION, "sums": SUMS, "padding": None, "calls": {}}
        if self.padding is not None:
            section["padding"] = padding_text(self.padding[0], self.padding[1].values())
        for key, places in self.calls.items():
            entries = {place: entry for place, (shape, slot) in places.items()
                       if (entry := _entry(shape, slot.values())) is not None}
            if entries:
                section["calls"][key] = entries
        written = {key for key, _ in named_calls(root)}
        if any(key not in written for key in self.calls):
            section["events"] = list(self.events)
        return section


def _entry(shape: tuple[int, ...], values: list[float]) -> dict[str, Any] | None:
    """One tensor's sketch as the ``twin`` section writes a fingerprint (``core/twin.py``); None where a sum is not
    finite (a ``+inf``) or nothing was kept."""
    kept, sumsq, left_out = int(values[SUMS]), values[SUMS + 1], int(values[SUMS + 2])
    if kept <= 0 or not all(math.isfinite(v) for v in values[:SUMS + 2]):
        return None
    sums = tuple(float(v) for v in values[:SUMS])
    return TwinPrint(tuple(shape), sums, kept, math.sqrt(sumsq / kept), left_out).to_dict()


def _version(tensor: torch.Tensor) -> int | None:
    try:
        return tensor._version
    except RuntimeError:  # a tensor made in inference mode keeps no count
        return None
