"""A sketch of every leaf's float tensors as the run itself computed them: the sidecar's ``sketch`` section.

A trace of printed values (``use_repr=True``) recorded without its float64 twin (``measure_rounding=False``,
transformers' drop-in) holds only their corners; two such folders cannot tell how far a call's inputs and outputs
differ. The sketch keeps, for each float input and output of every leaf call that holds no matrix of its own
(elementwise functions, norms: ``_sketched``) and that pruning keeps in the files, the twin fingerprint's 16
random-sign sums (``twin/fingerprint.py``, the same signs and chunks) of the run's own tensor in float64, padding
rows left out, with the count kept and their sum of squares. Two folders' sketches then give at every call an
estimate of ``‖x_b − x_a‖`` (the sums' difference: its expected sum of squares is ``‖Δ‖²``), the exact norms of both
sides, and whether the two tensors are the same bit for bit (``diff/verdict/sketch_verdict.py``).

Each distinct tensor is sketched once per forward (a leaf's input is mostly an earlier leaf's output); an in-place
change makes it new again. Three passes over a tensor, its numbers joining the forward's one transfer
(``HostBatch``): nothing is read back during the forward. A tensor that holds a NaN, an infinity or a sentinel (a
mask's fill), or that cannot be sketched, is left out, never an exception.
"""

from __future__ import annotations

import math
import weakref
from typing import TYPE_CHECKING, Any

import torch

from ..core.sketch import SKETCH_VERSION
from ..core.twin import SUMS, TwinPrint
from .twin.forward import find_valid
from .twin.print_numbers import padding_text
from .twin.fingerprint import element_and_chunk_signs
from .twin.signs import CHUNK, SENTINEL, valid_shape

if TYPE_CHECKING:  # pragma: no cover
    from .speculate import Site, Speculation
    from .transfer import HostBatch, Slot

_MAX_DEPTH = 16


class RunSketch:
    """The sketches of one top-level forward, on their way to the host."""

    def __init__(self, batch: HostBatch, args: tuple, kwargs: dict[str, Any], speculation: Speculation) -> None:
        self.batch = batch
        self._speculation = speculation
        self._open: set[str] = set()  # the leaves sketched at their start, until they return
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
        self.calls: dict[str, dict[str, tuple[tuple[int, ...], Slot, Slot | int]]] = {}
        self._seen: dict[int, tuple[Any, tuple[Slot, Slot | int], int | None]] = {}
        self._masks: dict[tuple[tuple[int, ...], int, torch.device], tuple[torch.Tensor, Slot]] = {}

    def enter(self, key: str, args: tuple, kwargs: dict[str, Any], site: Site | None = None,
              forward: Any = None) -> None:
        """A call starts (``site``: where, ``forward``: what runs): the float inputs of a leaf a bound can judge
        (``_sketched``), sketched before its code can change them in place. A call with children only marks its
        place (what it reads and returns is its children's), and so does a leaf of a layer block that pruning
        will leave out of the files (``speculate.py``): without its printed values no operation is read there."""
        if site is None or site.has_children or self._speculation.deferring is not None or not _sketched(forward):
            return
        self._open.add(key)
        found: dict[str, tuple[tuple[int, ...], Slot, Slot | int]] = {}
        for i, value in enumerate(args):
            self._walk(value, f"args.{i}", found, 0)
        for name, value in kwargs.items():
            self._walk(value, f"kwargs.{name}", found, 0)
        self.calls[key] = found

    def leave(self, key: str, out: Any) -> None:
        """A call returned ``out``: a sketched leaf's float outputs."""
        if key in self._open:
            self._open.discard(key)
            self._walk(out, "out", self.calls.setdefault(key, {}), 0)

    def _walk(self, value: Any, place: str, found: dict, depth: int) -> None:
        if depth > _MAX_DEPTH:
            return
        if type(value) is torch.Tensor or isinstance(value, torch.Tensor) and not hasattr(value, "placements"):
            if value.is_floating_point() and value.numel() > 0 and not value.is_meta \
                    and value.layout == torch.strided:
                sketched = self._sketch(value)
                if sketched is not None:
                    found[place] = (tuple(value.shape), *sketched)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                self._walk(item, f"{place}.{i}", found, depth + 1)
        elif isinstance(value, dict):
            for name, item in value.items():
                self._walk(item, f"{place}.{name}", found, depth + 1)

    def _sketch(self, tensor: torch.Tensor) -> tuple[Slot, Slot | int] | None:
        """The slot of the tensor's sums and sum of squares, and its kept count (a slot where padding is left out)."""
        version = _version(tensor)
        entry = self._seen.get(id(tensor))
        if entry is not None and entry[0]() is tensor and entry[2] == version and version is not None:
            return entry[1]
        try:
            numbers, kept = self._numbers(tensor)
            found = self.batch.add(numbers), kept
        except Exception:  # noqa: BLE001 - a tensor that cannot be sketched is left out
            return None
        self._seen[id(tensor)] = (weakref.ref(tensor), found, version)
        return found

    def _numbers(self, x: torch.Tensor) -> tuple[torch.Tensor, Slot | int]:
        """The fingerprint's 16 sums (``twin/fingerprint.py``: the same signs and chunks) of ``x``'s values in float64
        with padding rows zeroed, and their sum of squares; and how many were kept. A few kernels per tensor: its
        float64 copy, the last chunk padded with zeros, the chunks folded by their signs and then into the 16 sums
        (two matrix-vector products), the sum of squares, one join. NaNs and sentinels are not left out as the twin's
        fingerprint leaves them: they make the numbers unusable (``_entry``)."""
        with torch._C.DisableTorchFunction():
            device = x.device
            values = x.detach().to(torch.float64)
            kept: Slot | int = x.numel()
            shape = valid_shape(tuple(x.shape), tuple(self.valid.shape)) if self.valid is not None else None
            if shape is not None:
                keep, kept = self._keep(tuple(shape), x.numel() // math.prod(shape), device)
                values = torch.where(keep, values, 0.0)
            values = values.reshape(-1)
            rest = values.numel() % CHUNK
            if rest:  # the last chunk, its missing elements zeros
                values = torch.nn.functional.pad(values, (0, CHUNK - rest))
            chunks = values.view(-1, CHUNK)
            w, s = _signs(device, chunks.shape[0])
            sums = (w[: chunks.shape[0]] @ chunks) @ s
            return torch.cat([sums, torch.dot(values, values).reshape(1)]), kept

    def _keep(self, shape: tuple[int, ...], times: int, device: torch.device) -> tuple[torch.Tensor, Slot]:
        """The padding mask broadcast to ``shape`` (bool), and the slot of how many of ``times`` such blocks keep."""
        found = self._masks.get((shape, times, device))
        if found is None:
            valid = self.valid if self.valid.device == device else self.valid.to(device)
            keep = valid.reshape(shape).bool()
            count = self.batch.add((keep.sum().to(torch.float64) * times).reshape(1))
            found = self._masks[(shape, times, device)] = keep, count
        return found

    def section(self) -> dict[str, Any]:
        """The sidecar's ``sketch`` section (``core/sketch.py``), once the forward's numbers are on the host."""
        self._seen = {}
        section: dict[str, Any] = {"version": SKETCH_VERSION, "sums": SUMS, "padding": None, "calls": {}}
        if self.padding is not None:
            section["padding"] = padding_text(self.padding[0], self.padding[1].values())
        for key, places in self.calls.items():
            entries = {place: entry for place, (shape, slot, kept) in places.items()
                       if (entry := _entry(shape, slot.values(), kept)) is not None}
            if entries:
                section["calls"][key] = entries
        return section


def _sketched(forward: Any) -> bool:
    """Whether a leaf's tensors are sketched: not where its module holds a matrix of its own (a linear map, a
    convolution, an embedding), whose weights the fingerprints judge; elementwise functions and norms, whose bugs
    only their values show, are (``diff/verdict/sketch_verdict.py``). Their tensors are most of a model's."""
    if forward is None:
        return False
    parameters = getattr(getattr(forward, "__self__", None), "_parameters", None)
    return not parameters or not any(p is not None and p.dim() >= 2 for p in parameters.values())


_FOLDS: dict[torch.device, torch.Tensor] = {}


def _signs(device: torch.device, chunks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The fingerprint's chunk signs ``W`` (``twin/fingerprint.py``'s) and its element signs ``S`` as a ``[CHUNK, 16]``
    matrix that folds a chunk into the 16 sums (element ``i`` of a chunk goes to sum ``i mod 16`` with the sign
    ``S[i]``), kept per device."""
    s, w = element_and_chunk_signs(device, max(chunks, 1))
    fold = _FOLDS.get(device)
    if fold is None:
        fold = _FOLDS[device] = torch.zeros(CHUNK, SUMS, dtype=torch.float64, device=device)
        fold[torch.arange(CHUNK, device=device), torch.arange(CHUNK, device=device) % SUMS] = s
    return w, fold


def _entry(shape: tuple[int, ...], values: list[float], kept: Slot | int) -> dict[str, Any] | None:
    """One tensor's sketch as the ``twin`` section writes a fingerprint (``core/twin.py``); None where a number is
    not finite or a value is a sentinel (NaN, infinity, a mask's fill: no difference can be read off the sums), or
    nothing was kept."""
    count = int(kept if isinstance(kept, int) else kept.values()[0])
    sumsq = values[SUMS]
    if count <= 0 or not all(math.isfinite(v) for v in values) or sumsq >= SENTINEL**2:
        return None
    return TwinPrint(tuple(shape), tuple(float(v) for v in values[:SUMS]), count, math.sqrt(sumsq / count)).to_dict()


def _version(tensor: torch.Tensor) -> int | None:
    try:
        return tensor._version
    except RuntimeError:  # a tensor made in inference mode keeps no count
        return None
