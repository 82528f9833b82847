"""Comparing a trace of whole tensors with a tensor-parallel run: every sharded tensor reassembled first.

When one side of ``compare`` was loaded from a folder of ``rank_<r>/`` folders (``Trace.ranks``), its
calls are aligned through its lowest rank's trace (all ranks recorded the same call tree), and each of
its tensors is put back together from every rank's piece before it is measured against the other
side (``reassemble.py``): by the placements the sidecar recorded for a DTensor, else by the rule the
shapes and values show (plain tensors split by hand). The result is a ``ShardedDiff``: the usual
numbers on the whole tensor, the rule used, and the ranks whose own piece differs from the piece of
the reference they should hold.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from ...core.dtypes import dtype_kind, short_dtype
from ...core.node import Node
from ...core.ranks import DistributedInfo, Layout, distributed_info
from ...core.tensor import TensorValue
from ...core.trace import Trace
from ..measure.metrics import TensorDiff, default_tolerance, diff_tensors
from ..align.pairing import CallMeasure, compare_calls
from .reassemble import (
    assemble,
    expected_piece,
    infer,
    max_abs_diff,
    parse_placement,
    tiles,
    wrong_pieces,
)

if TYPE_CHECKING:  # pragma: no cover
    import torch

CallComparer = Callable[[Node, Node], list[TensorDiff]]


class MemoryTensor(TensorValue):
    """A TensorValue held in memory (a tensor reassembled from ranks): ``load()`` returns it."""

    __slots__ = ("_tensor",)
    REF = "./<in memory>"

    def __init__(self, tensor: torch.Tensor, dtype: str) -> None:
        super().__init__(tuple(tensor.shape), dtype, self.REF)
        self._tensor = tensor

    def load(self) -> torch.Tensor:
        return self._tensor


@dataclass
class ShardedDiff(TensorDiff):
    """A TensorDiff whose tensor on one side was reassembled from the pieces of several ranks.

    ``rule`` is how (``Shard(2)``, ``Replicate()``, ``Partial(sum)``, ``Shard(0),Shard(1)``: one
    placement per mesh dimension), ``inferred`` says it came from shapes and values (plain tensors)
    rather than from a DTensor's recorded placements; ``wrong_ranks`` maps each rank whose own piece
    differs from the piece of the other side it should hold to that piece's max abs difference;
    ``local_shapes`` is each rank's piece shape; ``note`` says what else is worth knowing.
    """

    rule: str | None = None
    inferred: bool = False
    wrong_ranks: dict[int, float] = field(default_factory=dict)
    local_shapes: dict[int, tuple[int, ...]] = field(default_factory=dict)
    note: str = ""


class _Place:
    """One tensor place of a ranked call: every rank's piece and, for a DTensor, every rank's layout."""

    def __init__(self, arg: str, pieces: dict[int, TensorValue], layouts: dict[int, Layout]) -> None:
        self.arg = arg
        self.pieces = pieces
        self.layouts = layouts
        first = next(iter(pieces.values()))
        self.dtype = first.dtype
        self.kind = dtype_kind(first.dtype)

    def fits(self, shape: tuple[int, ...], every_rank: bool) -> bool:
        """True when these pieces can be (part of) a tensor of ``shape``."""
        if self.layouts:
            return next(iter(self.layouts.values())).global_shape == shape
        shapes = [p.shape for p in self.pieces.values()]
        if every_rank:
            return tiles(shapes, shape)
        return all(len(s) == len(shape) and all(x <= y for x, y in zip(s, shape)) for s in shapes)


class BothRanked(ValueError):
    """Both sides of a comparison are tensor-parallel runs: they are compared one rank of each."""


def call_comparer(a: Trace, b: Trace, rtol: float | None, atol: float | None,
                  ignore: re.Pattern[str] | None, measure: CallMeasure | None = None) -> CallComparer:
    """How ``compare`` compares the tensors of two aligned calls: through the ranks when a side has them."""
    if a.ranks and b.ranks:
        raise BothRanked("both traces are tensor-parallel runs: compare them rank by rank, e.g. "
                         "compare(load_trace(a, rank=r), load_trace(b, rank=r))")
    if a.ranks or b.ranks:
        return RankedCalls(b if b.ranks else a, bool(b.ranks), rtol, atol, ignore)
    return lambda x, y: compare_calls(x, y, rtol, atol, ignore, measure)


def ranked_rename(a: Trace, b: Trace) -> dict[str, str] | None:
    """The ``rename`` a comparison with a tensor-parallel side aligns by when none is given, else None.

    Local shards have other shapes than whole tensors, which would mislead the alignment by call order,
    so such a comparison pairs calls by module path (b's root class name read as a's); so does one with one
    rank's trace of a run of several (``ranks=0``, the default, under torchrun).
    """
    if not (a.ranks or b.ranks or one_rank_of_several(a) or one_rank_of_several(b)):
        return None
    if a.model_name == b.model_name:
        return {}
    return {f"^{re.escape(b.model_name)}(?=\\.|$)": a.model_name}


def one_rank_of_several(trace: Trace) -> bool:
    """True for one rank's trace of a run of several ranks (its tensors may be local pieces), not joined."""
    section = trace.sidecar.get("distributed") if not trace.ranks else None
    return isinstance(section, dict) and isinstance(section.get("world_size"), int) and section["world_size"] > 1


def _choose(arg: str, candidates: list[tuple[str, bool, bool]], used: set[int], io: str) -> int | None:
    """The candidate ``(name, fits, same kind)`` to pair with ``arg``, as ``pairing.compare_calls`` pairs:
    the same name when it fits, else the first that fits; an output of the same name that does not fit
    pairs too (a shape mismatch). The chosen index is added to ``used``."""
    fallback = by_name = None
    for k, (name, fits, same_kind) in enumerate(candidates):
        if k in used or not same_kind:
            continue
        if fits and name == arg:
            fallback = k
            break
        if fits and fallback is None:
            fallback = k
        elif not fits and name == arg and by_name is None:
            by_name = k
    chosen = fallback if fallback is not None else by_name if io == "output" else None
    if chosen is not None:
        used.add(chosen)
    return chosen


class RankedCalls:
    """Compares a call of the whole-tensor side with the same call on every rank of the ranked side."""

    def __init__(self, ranked: Trace, ranked_is_b: bool, rtol: float | None, atol: float | None,
                 ignore: re.Pattern[str] | None) -> None:
        self.ranked_is_b = ranked_is_b
        self.rtol, self.atol, self.ignore = rtol, atol, ignore
        self.nodes = {r: t.nodes() for r, t in sorted(ranked.ranks.items())}
        self.info: dict[int, DistributedInfo] = {}
        for rank, trace in ranked.ranks.items():
            info = distributed_info(trace)
            if info is None:
                raise ValueError(f"rank {rank}'s trace has no 'distributed' sidecar section: load rank folders "
                                 "with nbtrace.load_trace(folder)")
            self.info[rank] = info
        base = self.info[min(self.info)]
        self.world = base.world_size
        self.every_rank = base.recorded == tuple(range(self.world))

    def __call__(self, x: Node, y: Node) -> list[TensorDiff]:
        whole, ranked = (x, y) if self.ranked_is_b else (y, x)
        rank_nodes = {r: nodes[ranked.index] for r, nodes in self.nodes.items()}
        diffs: list[TensorDiff] = []
        for io in ("input", "output"):
            tensors = [(arg, t) for kind, arg, t in whole.tensors() if kind == io and not self._skip(arg)]
            places = [p for p in self._places(ranked, rank_nodes, io) if not self._skip(p.arg)]
            for (arg, tensor), place in self._pairs(tensors, places, io):
                a_arg, b_arg = (arg, place.arg) if self.ranked_is_b else (place.arg, arg)
                diffs.append(self._diff(io, a_arg, b_arg, tensor, place))
        return diffs

    def _skip(self, arg: str) -> bool:
        return self.ignore is not None and self.ignore.search(arg) is not None

    def _places(self, node: Node, rank_nodes: dict[int, Node], io: str) -> list[_Place]:
        by_rank = {r: {arg: t for kind, arg, t in n.tensors() if kind == io} for r, n in rank_nodes.items()}
        places = []
        for arg in by_rank[min(by_rank)]:
            pieces = {r: tensors[arg] for r, tensors in by_rank.items() if arg in tensors}
            layouts = {r: lay for r in pieces if (lay := self.info[r].layout(node.module_path, node.call_index, arg))}
            places.append(_Place(arg, pieces, layouts))
        return places

    def _pairs(self, tensors: list[tuple[str, TensorValue]], places: list[_Place], io: str
               ) -> list[tuple[tuple[str, TensorValue], _Place]]:
        """Which whole tensor goes with which ranked place, walking a's side (the rule of ``pairing.py``)."""
        def option(tensor: TensorValue, place: _Place) -> tuple[bool, bool]:
            same_kind = dtype_kind(tensor.dtype) == place.kind
            return same_kind and place.fits(tensor.shape, self.every_rank), same_kind

        pairs = []
        used: set[int] = set()
        if self.ranked_is_b:
            for arg, tensor in tensors:
                k = _choose(arg, [(p.arg, *option(tensor, p)) for p in places], used, io)
                if k is not None:
                    pairs.append(((arg, tensor), places[k]))
        else:
            for place in places:
                k = _choose(place.arg, [(arg, *option(t, place)) for arg, t in tensors], used, io)
                if k is not None:
                    pairs.append((tensors[k], place))
        return pairs

    # -- one tensor ------------------------------------------------------------------------
    def _diff(self, io: str, a_arg: str, b_arg: str, whole: TensorValue, place: _Place) -> ShardedDiff:
        shapes = {r: p.shape for r, p in place.pieces.items()}
        a_dtype, b_dtype = (whole.dtype, place.dtype) if self.ranked_is_b else (place.dtype, whole.dtype)
        result = ShardedDiff(io, a_arg, b_arg, (), (), short_dtype(a_dtype), short_dtype(b_dtype), local_shapes=shapes)
        if place.layouts:
            result.rule = ",".join(next(iter(place.layouts.values())).placements)
        if not place.fits(whole.shape, self.every_rank):
            return self._shape_mismatch(result, whole, place)
        if whole.ref is None or any(p.ref is None for p in place.pieces.values()):
            result.problem = "reassembling ranks needs full tensors on both sides: trace with use_repr=False"
            return self._oriented(result, whole.shape, whole.shape)
        reference = whole.load()
        pieces = {r: p.load() for r, p in place.pieces.items()}
        rtol, atol = default_tolerance(a_dtype, b_dtype)
        rtol, atol = (rtol if self.rtol is None else self.rtol), (atol if self.atol is None else self.atol)
        magnitude = reference.abs() if reference.is_complex() else reference.double().abs()
        finite = magnitude[magnitude.isfinite()]
        scale = float(finite.max()) if finite.numel() else 0.0
        tol = atol + rtol * scale
        if place.layouts:
            rebuilt, expected, note = self._known(place, pieces, reference)
        else:
            rebuilt, expected, note = self._inferred(result, pieces, reference, tol)
        wrong = wrong_pieces(pieces, expected, tol)
        result.note = note
        if rebuilt is not None:
            whole_part, ranked_part = reference, rebuilt
        elif expected and all(expected.get(r) is not None for r in pieces):  # some ranks missing: check the rest
            worst = max(pieces, key=lambda r: max_abs_diff(pieces[r], expected[r]))  # type: ignore[arg-type]
            whole_part, ranked_part = expected[worst], pieces[worst]
            result.note = f"{note}; each recorded rank's piece compared with its part of the other side"
        else:
            result.problem = note
            return self._oriented(result, whole.shape, whole.shape)
        values = (MemoryTensor(whole_part, whole.dtype), MemoryTensor(ranked_part, place.dtype))  # type: ignore[arg-type]
        pair = values if self.ranked_is_b else values[::-1]
        measured = diff_tensors(io, a_arg, b_arg, pair[0], pair[1], self.rtol, self.atol)
        for name in (f.name for f in fields(TensorDiff)):
            setattr(result, name, getattr(measured, name))
        self._oriented(result, whole.shape, whole.shape)
        result.wrong_ranks = wrong
        if wrong:
            worst_diff = max(wrong.values())
            result.ok = False
            result.max_abs = max(result.max_abs or 0.0, worst_diff)
            result.max_rel = result.max_abs / scale if scale > 0 else math.inf
            result.problem = f"the piece of rank{'s' if len(wrong) > 1 else ''} {', '.join(map(str, wrong))} differs"
        return result

    def _oriented(self, result: ShardedDiff, whole: tuple[int, ...], rebuilt: tuple[int, ...]) -> ShardedDiff:
        result.shape, result.b_shape = (whole, rebuilt) if self.ranked_is_b else (rebuilt, whole)
        return result

    def _shape_mismatch(self, result: ShardedDiff, whole: TensorValue, place: _Place) -> ShardedDiff:
        if place.layouts:
            size = tuple(next(iter(place.layouts.values())).global_shape)
            what = f"a DTensor of global shape {list(size)}"
        else:
            size = next(iter(place.pieces.values())).shape
            shapes = sorted(set(result.local_shapes.values()))
            what = f"pieces {[list(s) for s in shapes]} on {len(result.local_shapes)} ranks that do not make it"
        result.basis, result.ok = "shape", False
        result.problem = f"shape {list(whole.shape)} vs {what}"
        return self._oriented(result, whole.shape, size)

    def _known(self, place: _Place, pieces: dict[int, torch.Tensor], reference: torch.Tensor
               ) -> tuple[torch.Tensor | None, dict[int, torch.Tensor | None], str]:
        """Reassemble by the DTensor's placements, mesh group by mesh group (the group furthest from the
        reference stands for all); each rank's expected piece of the reference comes along."""
        layout = next(iter(place.layouts.values()))
        try:
            placements = [parse_placement(p) for p in layout.placements]
        except ValueError as exc:
            return None, {}, str(exc)
        expected = {r: expected_piece(reference, placements, lay.mesh.shape, lay.coord)
                    for r, lay in place.layouts.items() if lay.coord is not None}
        groups: dict[tuple[int, ...], dict[tuple[int, ...], torch.Tensor]] = {}
        for rank, lay in place.layouts.items():
            if lay.coord is not None:
                groups.setdefault(lay.mesh.ranks, {})[lay.coord] = pieces[rank]
        rebuilt: list[torch.Tensor] = []
        missing: set[int] = set()
        for mesh_ranks, by_coord in groups.items():
            if len(by_coord) < len(mesh_ranks):
                missing.update(r for r in mesh_ranks if r not in place.layouts)
            else:
                rebuilt.append(assemble(by_coord, placements, layout.mesh.shape))
        if not rebuilt:
            ranks = ", ".join(map(str, sorted(missing)))
            return None, expected, f"not reassembled: rank(s) {ranks} of its mesh were not recorded"
        note = f"{len(rebuilt)} mesh groups, the one furthest from the other side shown" if len(rebuilt) > 1 else ""
        return max(rebuilt, key=lambda t: max_abs_diff(t, reference)), expected, note

    def _inferred(self, result: ShardedDiff, pieces: dict[int, torch.Tensor], reference: torch.Tensor, tol: float
                  ) -> tuple[torch.Tensor | None, dict[int, torch.Tensor | None], str]:
        """Reassemble plain pieces by the rule their shapes and values show (every rank needed, in rank order)."""
        result.inferred = True
        if not self.every_rank:
            missing = sorted(set(range(self.world)) - set(pieces))
            return None, {}, (f"not reassembled: plain tensors need every rank, and rank(s) "
                              f"{', '.join(map(str, missing))} were not recorded")
        ordered = [pieces[r] for r in range(self.world)]
        found = infer(ordered, reference, tol)
        result.rule = found.rule
        expected: dict[int, torch.Tensor | None] = {}
        if found.rule == "Replicate()":
            expected = dict.fromkeys(pieces, reference)
        elif found.rule is not None and found.rule.startswith("Shard("):
            dim = int(found.rule[6:-1])
            expected = dict(enumerate(reference.split([p.shape[dim] for p in ordered], dim=dim)))
        return found.tensor, expected, found.note
