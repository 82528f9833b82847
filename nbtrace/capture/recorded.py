"""The forwards a Recorder has finished: the last one in memory, earlier ones on disk only.

A Recorder keeps the call tree of its last forward (``rec.trace``). When the next forward
starts, the previous one's files move into ``forward_<i>/`` and its tree is released: it
lives in its files, and ``rec.traces[i]`` reads it back on demand. So tracing a hundred
steps of ``generate`` holds one step in memory, not a hundred. A forward whose files could
not be written stays in memory.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, overload

from ..core.load import load_trace
from ..core.ranks import call_key
from ..core.trace import Trace


class Recorded:
    """One finished forward: its tree until someone asks for the Trace, then the Trace; later only its file."""

    def __init__(
        self,
        index: int,
        tree: dict[str, Any],
        source: Path | None,
        base_dir: Path,
        durations: dict[int, float | None],
        sidecar: dict[str, Any],
        generation: dict[str, Any] | None,
        autocast: dict[int, Any] | None = None,
    ) -> None:
        self.index = index
        self.tree: dict[str, Any] | None = tree
        self.source = source
        self.base_dir = base_dir
        self.durations = durations
        self.sidecar = sidecar
        self.generation = generation
        self._trace: Trace | None = None
        self._weak: weakref.ref[Trace] | None = None
        #: id(call's dict) -> the autocast it ran under, for calls that ran under one (``Node.autocast``)
        self.autocast: dict[int, Any] = autocast or {}

    def durations_in_order(self) -> list[float | None]:
        """Each call's duration, in call order."""
        if self._trace is not None:
            return [node.duration for node in self._trace.nodes()]
        assert self.tree is not None
        return [self.durations.get(id(raw)) for raw in walk_dicts(self.tree)]

    def trace(self) -> Trace:
        if self._trace is not None:
            return self._trace
        alive = self._weak() if self._weak is not None else None
        if alive is not None:
            return alive
        if self.tree is None:  # released: read it back from its files
            assert self.source is not None
            trace = load_trace(self.source)
            self._weak = weakref.ref(trace)
            return trace
        trace = Trace.from_tree(self.tree, kind="full", source=self.source, base_dir=self.base_dir)
        for raw, node in zip(walk_dicts(self.tree), trace.nodes()):
            node.duration = self.durations.get(id(raw))
            node.autocast = self.autocast.get(id(raw))
        trace.sidecar = self.sidecar
        self._trace, self.tree, self.durations, self.autocast = trace, None, {}, {}
        return trace

    def moved_to(self, destination: Path) -> None:
        """The files of this forward now live in ``destination``."""
        self.base_dir = destination
        if self.source is not None:
            self.source = destination / self.source.name
        trace = self._trace if self._trace is not None else self._weak() if self._weak is not None else None
        if trace is not None:
            trace.base_dir = destination
            trace.source = self.source
            for node in trace.nodes():
                for _, _, tensor in node.tensors():
                    tensor.base_dir = destination

    def release(self) -> None:
        """Let go of the tree: from now on the files are the only copy (kept if there are none)."""
        if self.source is None or not self.source.is_file():
            return
        if self._trace is not None:
            self._weak = weakref.ref(self._trace)
        self._trace, self.tree, self.durations, self.sidecar, self.generation = None, None, {}, {}, None
        self.autocast = {}


class RecordedTraces(Sequence[Trace]):
    """``rec.traces``: every forward of a Recorder, in order, each a Trace read on access.

    Earlier forwards are read back from their files, so holding this list costs nothing until
    an item is used; a Trace still referenced elsewhere is handed out again, not re-read.
    """

    def __init__(self, recorded: list[Recorded]) -> None:
        self._recorded = recorded

    def __len__(self) -> int:
        return len(self._recorded)

    @overload
    def __getitem__(self, index: int) -> Trace: ...

    @overload
    def __getitem__(self, index: slice) -> list[Trace]: ...

    def __getitem__(self, index: int | slice) -> Trace | list[Trace]:
        if isinstance(index, slice):
            return [item.trace() for item in self._recorded[index]]
        return self._recorded[index].trace()

    def __iter__(self) -> Iterator[Trace]:
        for item in list(self._recorded):
            yield item.trace()

    def sources(self) -> list[Path | None]:
        """The trace file of each forward (None where none was written)."""
        return [item.source for item in self._recorded]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, RecordedTraces)):
            return len(self) == len(other) and all(x == y for x, y in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<{len(self)} recorded forward(s)>"


def named_calls(root: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(call name, call)`` of every call of a JSON tree, in call order: the sidecar's names (``<path>@<n>`` for
    the n-th call of a path, ``core.ranks.call_key``)."""
    counts: dict[str, int] = {}
    for raw in walk_dicts(root):
        path = raw["module_path"]
        index = counts.get(path, 0)
        counts[path] = index + 1
        yield call_key(path, index), raw


def walk_dicts(root: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every call of a JSON tree, in call order (the order of ``Trace.nodes()``)."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.get("children", [])))
