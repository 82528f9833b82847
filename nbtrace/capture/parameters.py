"""Fingerprints of a model's parameters and buffers, for the sidecar's ``parameters`` section.

The most common porting bug is a weight converted wrongly (transposed, scaled, rounded
through another dtype, one block of rows off). A fingerprint lets ``compare`` name it
from the files alone, without storing the weights: per tensor its shape and dtype,
summary statistics, a bit checksum, the norms of up to ``BLOCKS`` blocks of rows and of
columns, which lower-precision dtypes hold it exactly, and ``SAMPLES`` values at fixed
pseudo-random positions (and, for a matrix, the values of its transpose at the same
positions, so a transposed copy shows, and a matrix held in the other layout is compared
value for value). Everything is computed on the tensor's device and its numbers
join the forward's ``HostBatch`` (``transfer.py``): they reach the host with the forward's
one transfer.

A file never lies: a tensor already fingerprinted is not computed again only when it provably
holds what it held then. Its object, version counter and storage are not proof (an edit through
``.data`` or ``param.data.copy_`` bumps no version the parameter shows), so every trace also
takes a cheap stamp of every tensor's bits (``_stamp_slot``: their sum and their values at fixed
positions, two kernels, so a scaled, shifted, converted, permuted or transposed copy changes it) and
reuses a fingerprint only where the stamp is the one it was computed with; a stale one is computed again.
"""

from __future__ import annotations

import json
import math
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from . import transfer
from .numpy_parameters import (  # noqa: F401 - BLOCKS, SAMPLES: still importable from here
    BLOCKS,
    NARROWER,
    SAMPLES,
    Layout,
    block_bounds,
    fill_fingerprint,
    sample_positions,
)
from .serialize import local_tensor
from .speculate import named_modules
from .twin.offload import offloaded_values

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _named_tensors(model: nn.Module, root: str) -> Iterator[tuple[str, str, str, torch.Tensor]]:
    """``(module path, name, "parameter"|"buffer", tensor)`` for every tensor a module holds directly."""
    for name, module in named_modules(model):
        path = f"{root}.{name}" if name else root
        for kind, items in (("parameter", module._parameters), ("buffer", module._buffers)):
            for key, tensor in items.items():
                if tensor is not None:
                    yield path, key, kind, tensor


# Fingerprints of tensors, shared by every trace of the process (id -> (weak reference, version, data pointer,
# bit stamp, fingerprint, its JSON text)): tracing the same model again, or each step of generate(), pays one stamp
# per weight (two kernels: a sum and a gather) instead of its fingerprint and its JSON.
_CACHE: dict[int, tuple[Any, int, int, tuple[int, ...], dict[str, Any], str]] = {}


class ParameterFingerprints:
    """Computes the ``parameters`` sidecar section of a model, reusing what has not changed."""

    def __init__(self, model: nn.Module, root: str) -> None:
        self.model = model
        self.root = root
        self._cache = _CACHE
        self._text: tuple[tuple[tuple[str, str, str], ...], str] | None = None  # the last section's rows and text

    def section(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``{module path: {tensor name: fingerprint}}`` for the model as it is now (a transfer of its own)."""
        batch = transfer.HostBatch()
        finish = self.start(batch)
        batch.fetch()
        return finish()[0]

    def start(self, batch: transfer.HostBatch) -> Callable[[], tuple[dict[str, dict[str, dict[str, Any]]], str]]:
        """Compute what changed on its device into ``batch``. The returned function, called after
        ``batch.fetch()``, gives the section (``{module path: {tensor name: fingerprint}}``) and its JSON text
        (``json.dumps(section, indent=1, sort_keys=True)``, put together from each fingerprint's text, kept with it:
        a model's weights rarely change between forwards, and encoding them is most of a sidecar's cost)."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        texts: dict[str, dict[str, str | _Pending]] = {}
        todo: list[_Pending] = []
        fresh: dict[int, _Pending] = {}  # a tensor held twice (tied weights) is computed once
        reused: dict[int, _Reused] = {}  # cached fingerprints, valid once their stamp is the one they were taken with
        offloaded = offloaded_values(self.model)  # weights an offloading hook keeps off the model: read there
        with torch.no_grad():
            for path, name, kind, held in _named_tensors(self.model, self.root):
                tensor = local_tensor(held)
                tensor = held if tensor is None else tensor
                if isinstance(tensor, torch.Tensor) and tensor.is_meta and id(held) in offloaded:
                    tensor = offloaded[id(held)][0]
                if not isinstance(tensor, torch.Tensor) or tensor.is_meta:
                    continue
                key = id(held)
                cached = self._cache.get(key)
                version = getattr(tensor, "_version", -1)
                pointer = tensor.data_ptr() if tensor.layout == torch.strided else 0
                if key in fresh:
                    pending = fresh[key]
                    fingerprint, text = pending.fingerprint, pending
                elif key in reused:
                    fingerprint, text = reused[key].fingerprint, reused[key]
                elif cached is not None and cached[0]() is held and cached[1] == version and cached[2] == pointer:
                    check = reused[key] = _Reused(cached, tensor, kind, batch)
                    fingerprint, text = check.fingerprint, check
                else:
                    pending = fresh[key] = _Pending.start(tensor, kind, held, key, batch)
                    todo.append(pending)
                    fingerprint, text = pending.fingerprint, pending
                out.setdefault(path, {})[name] = fingerprint
                texts.setdefault(path, {})[name] = text

        def finish() -> tuple[dict[str, dict[str, dict[str, Any]]], str]:
            stale = [check for check in reused.values() if not check.holds()]
            if stale:  # edited in place since (``.data``): computed again, in a transfer of their own
                again = transfer.HostBatch()
                for check in stale:
                    check.redo(again)
                again.fetch()
            for pending in todo + [check.pending for check in stale if check.pending is not None]:
                pending.fill()
                self._cache[pending.key] = (*pending.entry, pending.fingerprint, pending.text)  # once complete
            for path, names in out.items():  # a stale fingerprint's place takes the new one
                for name, text in names.items():
                    check = texts[path][name]
                    if isinstance(check, _Reused) and check.pending is not None:
                        names[name] = check.fingerprint
            if len(self._cache) > 4 * max(len(todo), 1024):  # forget tensors that no longer exist
                for key in [k for k, entry in self._cache.items() if entry[0]() is None]:
                    del self._cache[key]
            rows = tuple((path, name, text.text)
                         for path, names in texts.items() for name, text in names.items())
            if self._text is None or self._text[0] != rows:  # the same fingerprints as last time: the same text
                self._text = (rows, _section_text(rows))
            return out, self._text[1]

        return finish


def _section_text(rows: tuple[tuple[str, str, str], ...]) -> str:
    """``json.dumps(section, indent=1, sort_keys=True)`` from ``(path, name, fingerprint text at depth 2)``."""
    if not rows:
        return "{}"
    by_path: dict[str, list[tuple[str, str]]] = {}
    for path, name, text in rows:
        by_path.setdefault(path, []).append((name, text))
    paths = []
    for path, items in sorted(by_path.items()):
        lines = [f"  {json.dumps(name)}: {text}" for name, text in sorted(items)]
        paths.append(f" {json.dumps(path)}: {{\n" + ",\n".join(lines) + "\n }")
    return "{\n" + ",\n".join(paths) + "\n}"


class _Pending:
    """One fingerprint being computed: its numbers on their way to the host, then filled in."""

    __slots__ = ("entry", "fingerprint", "key", "layout", "numbers", "stamp", "sum", "text")

    def __init__(self, fingerprint: dict[str, Any], entry: tuple[Any, int, int], key: int) -> None:
        self.fingerprint = fingerprint
        self.entry: tuple[Any, ...] = entry  # (weak reference to the tensor, its version, its data pointer, stamp)
        self.key = key
        self.text = ""  # the fingerprint's JSON, as it stands two levels deep in the section
        self.numbers: transfer.Slot | None = None
        self.sum: transfer.Slot | None = None
        self.stamp: tuple[transfer.Slot, transfer.Slot] | None = None
        self.layout: Layout = (0, 0, 0, 0, ())

    @classmethod
    def start(cls, tensor: torch.Tensor, kind: str, held: torch.Tensor, key: int,
              batch: transfer.HostBatch) -> _Pending:
        """The fingerprint of ``tensor`` (held by the model as ``held``), its numbers and stamp queued in ``batch``."""
        fingerprint = {"kind": kind, "shape": list(tensor.shape), "dtype": str(tensor.dtype)[6:]}
        version = getattr(tensor, "_version", -1)
        pointer = tensor.data_ptr() if tensor.layout == torch.strided else 0
        pending = cls(fingerprint, (weakref.ref(held), version, pointer), key)
        pending.stamp = _stamp_slot(tensor, batch)
        if tensor.is_floating_point() and tensor.numel() > 0 and tensor.layout == torch.strided:
            pending.measure(tensor, batch)
        return pending

    def measure(self, tensor: torch.Tensor, batch: transfer.HostBatch) -> None:
        vector, self.layout = _numbers(tensor)
        self.numbers = batch.add(vector)
        self.sum = batch.add(_bit_sum(tensor))

    def fill(self) -> None:
        self._fill()
        self.entry = (*self.entry[:3], _stamp_value(self.stamp))
        self.text = json.dumps(self.fingerprint, indent=1, sort_keys=True).replace("\n", "\n  ")

    def _fill(self) -> None:
        if self.numbers is not None and self.sum is not None:
            fill_fingerprint(self.fingerprint, self.numbers.values(), self.sum.values()[0], self.layout)


class _Reused:
    """A cached fingerprint on probation: its tensor's stamp, taken now, must be the one it was computed with."""

    __slots__ = ("cached", "held", "kind", "pending", "slot", "tensor")

    def __init__(self, cached: tuple[Any, ...], tensor: torch.Tensor, kind: str, batch: transfer.HostBatch) -> None:
        self.cached, self.tensor, self.kind = cached, tensor, kind
        self.held = cached[0]()
        self.slot = _stamp_slot(tensor, batch)
        self.pending: _Pending | None = None  # the fingerprint computed again, when the tensor changed

    def holds(self) -> bool:
        return _stamp_value(self.slot) == self.cached[3]

    def redo(self, batch: transfer.HostBatch) -> None:
        self.pending = _Pending.start(self.tensor, self.kind, self.held, id(self.held), batch)

    @property
    def fingerprint(self) -> dict[str, Any]:
        return self.cached[4] if self.pending is None else self.pending.fingerprint

    @property
    def text(self) -> str:
        return self.cached[5] if self.pending is None else self.pending.text


def _stamp_slot(tensor: torch.Tensor, batch: transfer.HostBatch) -> tuple[transfer.Slot, transfer.Slot] | None:
    """The tensor's stamp queued in ``batch``, two kernels: the wrapping sum of its bits, and its bits at ``SAMPLES``
    fixed pseudo-random positions (a fast read of the weights, as a forward reads them). An edit that scales,
    shifts or converts the values changes the sum and the samples; one that moves them (rows permuted, a square
    matrix transposed) changes the samples but by a coincidence; a change of one value changes the sum. None for a
    tensor with no strided data of its own."""
    if tensor.layout != torch.strided or tensor.numel() == 0 or tensor.element_size() not in _INT_VIEW:
        return None
    bits = tensor.detach().contiguous().view(_INT_VIEW[tensor.element_size()]).reshape(-1)
    # a wrapping sum in the bits' own width (int32 at most): exact in any order, and vectorised where an int64
    # accumulation of int32 values is not (a tenth of the time on a CPU)
    total = bits.sum(dtype=torch.int64 if bits.element_size() == 8 else torch.int32)
    return batch.add(total), batch.add(bits.index_select(0, _positions(bits)))


def _stamp_value(slots: tuple[transfer.Slot, transfer.Slot] | None) -> tuple[int, ...]:
    return () if slots is None else (*slots[0].values(), *slots[1].values())


_POSITIONS: dict[tuple[int, torch.device], torch.Tensor] = {}  # sample positions by size and device: constants


def _positions(bits: torch.Tensor) -> torch.Tensor:
    key = (bits.numel(), bits.device)
    found = _POSITIONS.get(key)
    if found is None:
        if len(_POSITIONS) > 4096:
            _POSITIONS.clear()
        found = _POSITIONS[key] = torch.tensor(sample_positions(bits.numel()), dtype=torch.long, device=bits.device)
    return found


def _numbers(tensor: torch.Tensor) -> tuple[torch.Tensor, Layout]:
    """One float64 vector: stats, row-block norms, column-block norms, samples, mirrored samples, and
    for each narrower dtype 1.0 when every sample survives a round trip through it (else 0.0).

    Sums are taken in float32 (float64 for float64 tensors), which is enough to tell
    weights apart; exactness in narrower dtypes is judged from the samples.
    """
    x = tensor.detach()
    if x.element_size() < 4:  # half precision: sums in float32
        x = x.float()
    flat = x.reshape(-1)
    numel = flat.numel()
    total = flat.sum().to(torch.float64)
    squares = flat.square()
    if x.dim() >= 2:
        matrix = squares.reshape(x.shape[0], -1)
        row_norms = _block_sums(matrix.sum(dim=1).to(torch.float64)).sqrt()
        col_norms = _block_sums(matrix.sum(dim=0).to(torch.float64)).sqrt()
        square_sum = row_norms.square().sum()
    else:
        row_norms = col_norms = total.new_zeros(0)
        square_sum = squares.sum().to(torch.float64)
    low, high = torch.aminmax(flat)
    mean = total / numel
    variance = (square_sum - numel * mean * mean) / max(numel - 1, 1)
    std = variance.clamp(min=0).sqrt() if numel > 1 else total.new_tensor(math.nan)
    low, high = low.to(torch.float64), high.to(torch.float64)
    stats = torch.stack([mean, std, low, high, torch.maximum(low.abs(), high.abs()), square_sum.sqrt()])
    index = _positions(flat)
    samples = tensor.detach().reshape(-1)[index].to(torch.float64)
    mirrored = total.new_zeros(0)
    if x.dim() == 2 and min(x.shape) > 1:  # the transpose [C, R] at the same flat positions
        rows, cols = x.shape
        mirrored = tensor.detach().reshape(-1)[(index % rows) * cols + index // rows].to(torch.float64)
    raw = tensor.detach().reshape(-1)[index]
    narrower = tuple(name for name in NARROWER if _narrower(name, raw.dtype))
    flags = [_exact_in(raw, name) for name in narrower]
    vector = torch.cat([stats, row_norms, col_norms, samples, mirrored, *flags])
    return vector, (row_norms.numel(), col_norms.numel(), samples.numel(), mirrored.numel(), narrower)


def _block_sums(values: torch.Tensor) -> torch.Tensor:
    """Sums of up to BLOCKS contiguous blocks of a 1-D tensor."""
    bounds = torch.tensor(block_bounds(values.numel()), device=values.device)
    cumulative = torch.cat([values.new_zeros(1), values.cumsum(0)])
    return cumulative[bounds[1:]] - cumulative[bounds[:-1]]


def _narrower(name: str, wide: torch.dtype) -> bool:
    """True when torch has the dtype ``name`` and it is narrower than ``wide``."""
    narrow = getattr(torch, name, None)
    return isinstance(narrow, torch.dtype) and narrow.itemsize < wide.itemsize


def _exact_in(values: torch.Tensor, name: str) -> torch.Tensor:
    """1.0 (float64, 1 element) when every one of ``values`` survives a round trip through dtype ``name``."""
    try:
        same = (values.to(getattr(torch, name)).to(values.dtype) == values).all()
    except (RuntimeError, TypeError):  # no such conversion on this device
        same = torch.zeros((), dtype=torch.bool, device=values.device)
    return same.reshape(1).to(torch.float64)


def _bit_sum(tensor: torch.Tensor) -> torch.Tensor:
    """The wrapping sum of the tensor's bits as integers (as int64), on its device."""
    view = tensor.detach().contiguous().view(_INT_VIEW[tensor.element_size()])
    return view.sum(dtype=torch.int64)
