"""The one place where recorded values cross from their device to the host.

On a GPU every device-to-host transfer is a synchronisation: the host waits
until the device has finished everything queued before it. nbtrace's
per-tensor work therefore never reads a tensor's values where it is: the
printed elements and the four stats of every tensor are computed on the
tensor's device, kept there (they are copies), and moved to the host all
together at the end of the forward by a ``HostBatch``: one transfer per device
per forward. The numbers of the sidecar ride in the same batch: the parameter
fingerprints (``parameters.py``) and a generation step's KV cache and picked
token (``generation.py``). The data of safetensors files moves with
``to_host_many``, once per record (a call's inputs, a call's outputs).

Every transfer goes through ``to_host``; the tests count its calls, and check
that nothing else in the capture reads a tensor's values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

_COMPACT_AT = 256  # pending pieces per group before they are joined on the device (bounds the tensors kept)
_FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32})
_UINT64 = getattr(torch, "uint64", None)
_BITS_64 = frozenset({torch.float64, torch.int64} | ({_UINT64} if _UINT64 is not None else set()))


def host_readable(tensor: torch.Tensor) -> bool:
    """True when ``tensor``'s values can be read with no device-to-host transfer (it lives in host memory)."""
    return tensor.is_cpu


def to_host(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in host memory: the one device-to-host transfer of nbtrace's per-tensor work."""
    return tensor.cpu()


def values(tensor: torch.Tensor) -> list:
    """The values of one tensor as Python numbers (one transfer)."""
    return to_host(tensor).tolist()


def to_host_many(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Host copies of ``tensors`` (contiguous, same dtype and shape), in one transfer per device.

    Tensors already in host memory are returned as they are (no copy).
    """
    out: list[Any] = [t if host_readable(t) else None for t in tensors]
    by_device: dict[torch.device, list[int]] = {}
    for i, tensor in enumerate(tensors):
        if out[i] is None:
            by_device.setdefault(tensor.device, []).append(i)
    for indices in by_device.values():
        # widest elements first: every piece then starts at a multiple of its element size
        indices.sort(key=lambda i: -tensors[i].element_size())
        parts = [tensors[i].detach().contiguous().reshape(-1).view(torch.uint8) for i in indices]
        host = to_host(torch.cat(parts)) if len(parts) > 1 else to_host(parts[0])
        start = 0
        for i, part in zip(indices, parts):
            source = tensors[i]
            out[i] = host[start : start + part.numel()].view(source.dtype).view(source.shape)
            start += part.numel()
    return out


def to_host_async(tensors: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], Callable[[], None] | None]:
    """Host copies of ``tensors`` and a function that waits until they have arrived (None: they are there).

    On a CUDA device the copy goes to pinned host memory on a side stream, queued behind the work that
    made the tensors, so the host does not wait for the device: a writer thread calls the wait before it
    reads the copy. Elsewhere this is ``to_host_many``.
    """
    devices = {t.device for t in tensors if not host_readable(t)}
    if len(devices) != 1 or next(iter(devices)).type != "cuda" or not all(t.is_cuda for t in tensors):
        return to_host_many(tensors), None
    device = next(iter(devices))
    main = torch.cuda.current_stream(device)
    side = _SIDE_STREAMS.get(device)
    if side is None:
        side = _SIDE_STREAMS[device] = torch.cuda.Stream(device)
    side.wait_stream(main)  # the copy starts when the tensors are computed
    order = sorted(range(len(tensors)), key=lambda i: -tensors[i].element_size())
    with torch.cuda.stream(side):
        parts = [tensors[i].detach().contiguous().reshape(-1).view(torch.uint8) for i in order]
        joined = torch.cat(parts) if len(parts) > 1 else parts[0]
        host = torch.empty(joined.shape, dtype=torch.uint8, pin_memory=True)
        host.copy_(joined, non_blocking=True)
        arrived = torch.cuda.Event()
        arrived.record(side)
    for tensor in tensors:  # the caching allocator must not hand their memory out before the copy has run
        tensor.record_stream(side)
    out: list[Any] = [None] * len(tensors)
    start = 0
    for i, part in zip(order, parts):
        out[i] = host[start : start + part.numel()].view(tensors[i].dtype).view(tensors[i].shape)
        start += part.numel()
    return out, arrived.synchronize


_SIDE_STREAMS: dict[torch.device, Any] = {}


def is_copy(host: torch.Tensor, tensor: torch.Tensor) -> bool:
    """True when ``host`` holds memory of its own, not ``tensor``'s (which the model may still change)."""
    return host.untyped_storage().data_ptr() != tensor.untyped_storage().data_ptr()


def checksum(tensor: torch.Tensor) -> int:
    """The wrapping sum of the bits of a tensor in host memory: changes when any value changes (bar contrived swaps)."""
    if not tensor.is_cpu:
        raise ValueError("checksum needs a tensor in host memory")
    size = tensor.element_size()
    return int(tensor.view(_BITS[size]).sum(dtype=_SUM[size])) if tensor.numel() else 0


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_SUM = {1: torch.int32, 2: torch.int32, 4: torch.int32, 8: torch.int64}


def _decode(piece: torch.Tensor, values: list) -> list:
    """Values read from a tensor in host memory, as ``HostBatch.fetch`` would bring them back."""
    if piece.dtype == _UINT64:
        return [v % (1 << 64) for v in values]
    return values


class Slot:
    """Where one piece added to a ``HostBatch`` is: its values already, or its group and position."""

    __slots__ = ("group", "length", "ready", "start")

    def __init__(self, group: _Group | None, start: int, length: int, ready: list | None = None) -> None:
        self.group = group
        self.start = start
        self.length = length
        self.ready = ready

    def values(self) -> list:
        """The piece's values as Python numbers (for a piece on a device: after ``HostBatch.fetch``)."""
        if self.ready is not None:
            return self.ready
        assert self.group is not None and self.group.values is not None, "HostBatch.fetch() has not run"
        return self.group.values[self.start : self.start + self.length]


class _Group:
    """Pieces of one dtype on one device, joined into one tensor before the transfer."""

    __slots__ = ("chunks", "device", "dtype", "length", "pending", "stacked", "values")

    def __init__(self, dtype: torch.dtype, device: torch.device, stacked: bool) -> None:
        self.dtype = dtype
        self.device = device
        self.stacked = stacked  # 0-dim pieces (stacked), else 1-dim pieces (concatenated)
        self.pending: list[torch.Tensor] = []
        self.chunks: list[torch.Tensor] = []
        self.length = 0
        self.values: list | None = None

    def add(self, piece: torch.Tensor, length: int) -> int:
        start = self.length
        self.pending.append(piece)
        self.length += length
        if len(self.pending) >= _COMPACT_AT:
            self.compact()
        return start

    def compact(self) -> None:
        if self.pending:
            join = torch.stack if self.stacked else torch.cat
            self.chunks.append(join(self.pending))
            self.pending = []

    def as_bits(self) -> torch.Tensor:
        """Every value of the group as 64-bit integers: exact for every dtype the fast printer covers."""
        self.compact()
        joined = torch.cat(self.chunks) if len(self.chunks) > 1 else self.chunks[0]
        self.chunks = []
        if self.dtype in _FLOATS:
            return joined.to(torch.float64).view(torch.int64)
        if self.dtype in _BITS_64:
            return joined.view(torch.int64)
        return joined.to(torch.int64)

    def decode(self, host: torch.Tensor) -> None:
        if self.dtype in _FLOATS or self.dtype == torch.float64:
            self.values = host.view(torch.float64).tolist()
        elif self.dtype == torch.bool:
            self.values = [bool(v) for v in host.tolist()]
        elif self.dtype == _UINT64:
            self.values = [v % (1 << 64) for v in host.tolist()]
        else:
            self.values = host.tolist()


class HostBatch:
    """Values of many tensors, computed on their device during a forward, moved to the host together.

    ``add`` keeps a piece (a copy: later in-place changes of the recorded
    tensor do not reach it) and returns its ``Slot``; ``fetch`` makes one
    transfer per device, after which every slot has its values. A piece already
    in host memory is read at once: that takes no transfer, and keeps no small
    tensors alive between the model's large ones (they would fragment the heap).
    """

    def __init__(self) -> None:
        self._groups: dict[tuple[torch.dtype, torch.device, bool], _Group] = {}

    def add(self, piece: torch.Tensor) -> Slot:
        """Add a 1-dim tensor, or a 0-dim one (stacked with the others)."""
        stacked = piece.dim() == 0
        length = 1 if stacked else piece.numel()
        if host_readable(piece):
            return Slot(None, 0, length, _decode(piece, [piece.item()] if stacked else piece.tolist()))
        key = (piece.dtype, piece.device, stacked)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(piece.dtype, piece.device, stacked)
        return Slot(group, group.add(piece, length), length)

    def add_scalars(self, pieces: Sequence[torch.Tensor]) -> Slot:
        """Add 0-dim tensors of one dtype and device, as one slot of ``len(pieces)`` values."""
        first = pieces[0]
        if host_readable(first):
            return Slot(None, 0, len(pieces), _decode(first, list(map(torch.Tensor.item, pieces))))
        key = (first.dtype, first.device, True)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(first.dtype, first.device, True)
        start = group.length
        group.pending.extend(pieces)
        group.length += len(pieces)
        if len(group.pending) >= _COMPACT_AT:
            group.compact()
        return Slot(group, start, len(pieces))

    def fetch(self) -> None:
        """Move every piece to the host: one transfer per device. The batch can be filled again after."""
        by_device: dict[torch.device, list[_Group]] = {}
        for group in self._groups.values():
            by_device.setdefault(group.device, []).append(group)
        self._groups = {}
        for groups in by_device.values():
            bits = [group.as_bits() for group in groups]
            host = to_host(torch.cat(bits) if len(bits) > 1 else bits[0])
            start = 0
            for group in groups:
                group.decode(host[start : start + group.length])
                start += group.length
