"""Data flow inside ONE trace: which code made each recorded tensor, and what that code could read.

Read as a sequence of events (a call's inputs when it starts, a leaf's outputs when it
ends), every recorded tensor either appeared before — the same values bit for bit,
recognised by a content fingerprint *within this trace* — or is fresh. A fresh tensor
was made by the code that ran since the previous event (a ``Producer``):

- at a leaf's output event: the leaf (``"leaf"``);
- at a call's input event right after a sibling with children ended: that sibling's own
  code after its last child, or the parent's code between the two (``"after"``, e.g. a
  residual add);
- at a call's input event right after layer blocks that pruning removed: those blocks,
  or the parent's code around them (``"pruned"``);
- otherwise the own code of the innermost call holding both events (``"glue"``, e.g.
  rotary and softmax inside an attention whose projections are modules);
- the model's inputs (``"inputs"``).

A producer knows the tensors it could have read: a leaf its inputs; other code
everything recorded earlier inside its call (code after a call also the parent's
inputs). Nothing here compares two traces, so the flow of a correct and of a buggy
port is the same: it serves to align calls and to separate inherited from added
differences.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...core.node import Node, PrunedGap
from ...core.tensor import TensorValue
from ...core.tensor_file import float64_values, open_plain_file, read_open_file, tensor_from_bytes
from ...errors import TraceFormatError
from ...core.trace import Trace

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

#: loaded tensors and file contents kept for reuse (bytes, each); the least recently used go first
CACHE_BYTES = 256 * 2**20
_MAX_HELD = 8192  # and at most this many tensors
_MAX_FILES = 2**17  # and this many files' contents


class TensorCache:
    """Reads recorded tensors' files once (keeping the most recent ones), loads and fingerprints them."""

    def __init__(self, limit: int = CACHE_BYTES) -> None:
        self.limit = limit
        self._loaded: OrderedDict[int, torch.Tensor] = OrderedDict()
        self._size = 0
        self._raw: dict[int, bytes] = {}
        self._raw_size = 0
        self._keys: dict[int, Hashable | None] = {}
        self._files: dict[tuple[int, int, int], Hashable | None] = {}
        self._linked: dict[tuple[int, int, int], int] = {}  # a hard-linked file -> the tensor whose read holds it

    def load(self, tensor: TensorValue) -> torch.Tensor | None:
        """The full tensor, or None when the trace holds none (printed values, stats)."""
        if tensor.ref is None:
            return None
        key = id(tensor)
        if key in self._loaded:
            self._loaded.move_to_end(key)
            return self._loaded[key]
        loaded = tensor_from_bytes(self.raw(tensor), tensor.location)  # its own memory: no file mapping kept open
        size = loaded.numel() * loaded.element_size()
        if size <= self.limit:
            self._loaded[key] = loaded
            self._size += size
            while self._size > self.limit or len(self._loaded) > _MAX_HELD:
                _, dropped = self._loaded.popitem(last=False)
                self._size -= dropped.numel() * dropped.element_size()
        return loaded

    def float64(self, tensor: TensorValue) -> np.ndarray | None:
        """The full tensor as a flat float64 numpy array, or None without a file or for a dtype numpy does not
        hold (float8, complex: ``load`` serves those)."""
        if tensor.ref is None:
            return None
        return float64_values(self.raw(tensor), tensor.location)

    def raw(self, tensor: TensorValue) -> bytes:
        """The content of a tensor's file, which must be a plain file beside the trace (else TraceFormatError).

        Files are kept as first read until ``limit`` bytes are held, and then no more: a comparison reads a
        trace in call order twice (fingerprints, then values), where evicting the oldest would miss every time.
        """
        key = id(tensor)
        found = self._raw.get(key)
        if found is not None:
            return found
        fd, info = _open(tensor)
        try:
            held = self._linked.get((info.st_dev, info.st_ino, info.st_size)) if info.st_nlink > 1 else None
            if held is not None and held in self._raw:  # a hard link to a file read before: a repeated tensor
                return self._raw[held]
            data = read_open_file(fd, info.st_size)
        finally:
            os.close(fd)
        self._keep(key, data)
        return data

    def _keep(self, key: int, data: bytes) -> None:
        if self._raw_size + len(data) <= self.limit and len(self._raw) < _MAX_FILES:
            self._raw[key] = data
            self._raw_size += len(data)

    def fingerprint(self, tensor: TensorValue) -> Hashable | None:
        """Equal fingerprints mean equal values: a hash of the tensor's file, else the printed lines, else the
        stats."""
        key = id(tensor)
        if key in self._keys:
            return self._keys[key]
        head = (tensor.shape, tensor.dtype)
        found: Hashable | None = None
        if tensor.ref is not None:  # equal files: equal values (the writers put nothing else in them)
            found = self._file_fingerprint(tensor, head)
        elif tensor.lines is not None:
            found = (*head, tuple(tensor.lines))
        elif tensor.stats:
            found = (*head, tuple(sorted(tensor.stats.items())))
        self._keys[key] = found
        return found

    def flat_fingerprint(self, tensor: TensorValue) -> Hashable | None:
        """A fingerprint without the shape: equal for a tensor and a view of it in another shape (``nn.Flatten`` of
        ``[B, C, 1, 1]``), from the data of the tensor's file, else its stats (printed lines hold the shape)."""
        if tensor.ref is not None:
            found = self.fingerprint(tensor)
            return None if found is None else (math.prod(tensor.shape), *found[1:])
        if tensor.stats:
            return math.prod(tensor.shape), tensor.dtype, tuple(sorted(tensor.stats.items()))
        return None

    def _file_fingerprint(self, tensor: TensorValue, head: tuple) -> Hashable:
        """The hash of a tensor's file, read unless it is a hard link to a file hashed before (nbtrace links a
        repeated tensor); what is read stays in ``raw``'s store."""
        fd, info = _open(tensor)
        try:
            identity = (info.st_dev, info.st_ino, info.st_size) if info.st_nlink > 1 else None
            if identity is not None and identity in self._files:
                return self._files[identity]
            data = read_open_file(fd, info.st_size)
        finally:
            os.close(fd)
        self._keep(id(tensor), data)
        found = (*head, hashlib.blake2b(_data_part(data), digest_size=16).digest())
        if identity is not None:
            self._files[identity] = found
            self._linked[identity] = id(tensor)
        return found


def _data_part(data: bytes) -> memoryview:
    """A safetensors file's bytes after its header (which holds the shape: ``fingerprint``'s ``head`` holds it)."""
    view = memoryview(data)
    if len(data) < 8:
        return view
    start = 8 + int.from_bytes(data[:8], "little")
    return view[start:] if start <= len(data) else view


def _open(tensor: TensorValue) -> tuple[int, os.stat_result]:
    """``(descriptor, status)`` of a tensor's file, opened as a plain file beside the trace, not following a
    link; otherwise TraceFormatError naming why, as ``TensorValue.load`` names it. The caller closes it."""
    location = tensor.location
    opened = open_plain_file(location) if location is not None else None
    if opened is None:
        tensor.load()  # raises, naming the problem
        raise TraceFormatError(location, "is not a plain file")
    return opened


@dataclass(eq=False, slots=True)
class Slot:
    """One recorded tensor of one call (``io`` "input" or "output", ``arg`` its place name)."""

    node: Node
    io: str
    arg: str
    tensor: TensorValue
    key: Hashable | None
    event: int
    origin: Slot | None = None  # the first slot with the same values (None: this one is fresh)
    producer: Producer | None = None  # the code that made the values

    @property
    def source(self) -> Slot:
        """The slot where these values first appeared (itself when fresh)."""
        return self.origin or self

    def __repr__(self) -> str:
        return f"<Slot {self.node.module_path} {self.io} {self.arg} {list(self.tensor.shape)}>"


@dataclass(eq=False)
class Producer:
    """A stretch of code that made fresh tensors: a leaf, a call's own code, code after a call, pruned blocks."""

    node: Node
    kind: str  # "leaf" | "glue" | "after" | "pruned" | "inputs"
    event: int
    outputs: list[Slot] = field(default_factory=list)
    read: list[Slot] | None = None  # the tensors it could read (None: found from ``flow`` when first asked)
    gap: PrunedGap | None = None  # for "pruned": the layer blocks removed
    flow: Flow | None = field(default=None, repr=False)

    @property
    def inputs(self) -> list[Slot]:
        """The recorded tensors this code could have read (see the module docstring)."""
        if self.read is None:
            self.read = self.flow._readable(self) if self.flow is not None else []
        return self.read

    def __repr__(self) -> str:
        return f"<Producer {self.kind} {self.node.module_path} @{self.event}: {len(self.outputs)} out>"


@dataclass(slots=True)
class Event:
    index: int
    node: Node
    io: str
    slots: list[Slot]


class Flow:
    """The events, slots and producers of one trace, in call order."""

    def __init__(self, trace: Trace, cache: TensorCache | None = None) -> None:
        self.trace = trace
        self.cache = cache or TensorCache()
        self.events: list[Event] = []
        self.span: dict[int, tuple[int, int]] = {}  # id(node) -> (input event, output event)
        self.producers: list[Producer] = []
        #: the same stretches of code for tensors that are repeats in this trace: the other trace may not
        #: hand the same values on (a port that rebuilds position ids inside its model)
        self.passers: list[Producer] = []
        self._by_key: dict[Hashable, Slot] = {}
        self._slots: dict[tuple[int, str, str], Slot] = {}
        self._copies: dict[int, list[Slot]] = {}
        self._gaps: dict[int, PrunedGap] = {}  # id(call) -> the pruned layer blocks right before it
        for node in trace.nodes():
            for gap in node.pruned_layers() if len(node.children) > 1 else ():
                self._gaps[id(node.children[gap.position])] = gap
        self._build()

    # -- questions --------------------------------------------------------------------
    def slots(self, node: Node, io: str | None = None) -> list[Slot]:
        """The recorded tensors of one call (of ``io`` only, if given)."""
        start, end = self.span[id(node)]
        found = self.events[start].slots + (self.events[end].slots if end != start else [])
        return [s for s in found if io is None or s.io == io]

    def slot(self, node: Node, io: str, arg: str) -> Slot | None:
        return self._slots.get((id(node), io, arg))

    def copies(self, slot: Slot) -> list[Slot]:
        """Every slot holding the same values as ``slot``, in call order (the fresh one first)."""
        return self._copies.get(id(slot.source), [slot])

    def call_output(self, node: Node) -> list[Slot]:
        """What a call returned, as recorded: a leaf's outputs; for a call with children, the tensors fresh at
        the next event after it (its caller's next input) and its last child's outputs.

        When pruning removed layer blocks right after the call, the next event holds what those blocks made,
        not what the call returned, and the last child's outputs are all there is to offer: nothing recorded
        tells whether the call handed them on unchanged, so none is offered (an empty list)."""
        recorded = self.slots(node, "output")
        if recorded:
            return recorded
        end = self.span[id(node)][1]
        following = self.events[end + 1] if end + 1 < len(self.events) else None
        if following is not None and following.io == "input" and id(following.node) in self._gaps:
            return []
        after = [s for s in following.slots if s.origin is None] if following is not None else []
        last = self.events[end - 1].slots if end > 0 and self.events[end - 1].io == "output" else []
        return after + [s for s in last if s.io == "output"]

    # -- building ---------------------------------------------------------------------
    def _build(self) -> None:
        stack: list[tuple[Node, bool]] = [(self.trace.root, False)]
        while stack:
            node, done = stack.pop()
            if done:
                self.span[id(node)] = (self.span[id(node)][0], len(self.events))
                self._event(node, "output")
                continue
            self.span[id(node)] = (len(self.events), -1)
            self._event(node, "input")
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(node.children))

    def _event(self, node: Node, io: str) -> None:
        index = len(self.events)
        slots = []
        for kind, arg, tensor in node.tensors():
            if kind == io:
                slot = Slot(node, io, arg, tensor, self.cache.fingerprint(tensor), index)
                slots.append(slot)
                self._slots[(id(node), io, arg)] = slot
        event = Event(index, node, io, slots)
        self.events.append(event)
        producer: Producer | None = None
        passer: Producer | None = None
        for slot in slots:
            earlier = self._by_key.get(slot.key) if slot.key is not None else None
            if earlier is not None:
                slot.origin = earlier.source
                slot.producer = earlier.producer
                self._copies[id(slot.origin)].append(slot)
                if passer is None:
                    passer = self._stretch(event)
                    self.passers.append(passer)
                passer.outputs.append(slot)
                continue
            self._copies[id(slot)] = [slot]
            if producer is None:
                producer = self._stretch(event)
                self.producers.append(producer)
            slot.producer = producer
            producer.outputs.append(slot)
            if slot.key is not None:
                self._by_key[slot.key] = slot

    def _stretch(self, event: Event) -> Producer:
        """The code that ran since the previous event (see the module docstring)."""
        node = event.node
        if event.io == "output":  # a leaf, or the root's code after its last child
            kind = "leaf" if not node.children else "glue"
            producer = Producer(node, kind, event.index, flow=self)
        elif event.index == 0:
            producer = Producer(node, "inputs", 0, flow=self)
        elif id(node) in self._gaps and node.parent is not None:
            producer = Producer(node.parent, "pruned", event.index, gap=self._gaps[id(node)], flow=self)
        else:
            previous = self.events[event.index - 1]
            if previous.io == "output" and previous.node.children and previous.node.parent is node.parent:
                producer = Producer(previous.node, "after", event.index, flow=self)
            else:
                producer = Producer(innermost(previous.node, node), "glue", event.index, flow=self)
        return producer

    def _readable(self, producer: Producer) -> list[Slot]:
        if producer.kind == "leaf":
            return [s.source for s in self.slots(producer.node, "input")]
        if producer.kind == "inputs":
            return []
        start = self.span[id(producer.node)][0]
        events = self.events[start : producer.event]
        if producer.kind == "after" and producer.node.parent is not None:  # a residual add reads the parent's inputs
            events = [self.events[self.span[id(producer.node.parent)][0]], *events]
        seen: dict[int, Slot] = {}
        for event in events:
            for slot in event.slots:
                seen.setdefault(id(slot.source), slot.source)
        return list(seen.values())


def innermost(x: Node, y: Node) -> Node:
    """The innermost call holding both ``x`` and ``y`` (either may be it)."""
    chain = {id(n) for n in (x, *x.ancestors())}
    walker: Node | None = y
    while walker is not None and id(walker) not in chain:
        walker = walker.parent
    assert walker is not None, "two calls of one trace share its root"
    return walker
