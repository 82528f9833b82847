"""Putting a whole tensor back together from the pieces the ranks of a tensor-parallel run recorded.

- ``assemble``: the layout is known (a DTensor's placements, one per mesh dimension). Mesh dimensions
  are undone innermost first, as DTensor splits outermost first: ``Shard(d)`` concatenates along ``d``
  in mesh order, ``Replicate()`` keeps one copy (``expected_piece`` then checks every copy),
  ``Partial(op)`` reduces (sum, avg, max, min). Any mesh shape; uneven and empty shards included.
- ``infer``: plain tensors split by hand (no DTensor, Megatron style), on a 1-D mesh in rank order.
  The shapes decide where they can: one dimension smaller than the reference's, the sizes adding up
  to it, is ``Shard(d)``; the reference's own shape is ``Replicate()`` or ``Partial(sum)``, whichever
  agrees with the reference.
- ``expected_piece`` and ``wrong_pieces``: which ranks hold a piece that differs from the piece of the
  reference they should hold (a Partial piece cannot be checked alone).

No torch.distributed here: placements come as text (``Shard(2)``) from the sidecar.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # pragma: no cover
    import torch

Coord = tuple[int, ...]
REPLICATE, PARTIAL_SUM = "Replicate()", "Partial(sum)"
_PLACEMENT = re.compile(r"^(?:Shard\((?:dim=)?(-?\d+)\)|(Replicate)\(\)|Partial\((?:reduce_op=)?'?(sum|avg|max|min)'?\))$")


class Placement(NamedTuple):
    """One mesh dimension of a layout: ``kind`` is "shard", "replicate" or "partial"."""

    kind: str
    dim: int = 0
    op: str = "sum"


def parse_placement(text: str) -> Placement:
    """The placement a sidecar string names; ValueError for one nbtrace cannot undo (``_StridedShard``…)."""
    match = _PLACEMENT.match(text)
    if match is None:
        raise ValueError(f"cannot reassemble placement {text!r}")
    if match.group(1) is not None:
        return Placement("shard", int(match.group(1)))
    if match.group(2) is not None:
        return Placement("replicate")
    return Placement("partial", op=match.group(3))


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest absolute difference (inf for different shapes, nan where one side is nan)."""
    if a.shape != b.shape:
        return float("inf")
    if a.numel() == 0:
        return 0.0
    if a.is_complex() or b.is_complex():
        return float((a.to(b.dtype if b.is_complex() else a.dtype) - b).abs().max())
    return float((a.double() - b.double()).abs().max())


def mesh_coords(shape: Sequence[int]) -> list[Coord]:
    """Every coordinate of a mesh, row-major (the order of its rank list)."""
    coords: list[Coord] = [()]
    for size in shape:
        coords = [c + (i,) for c in coords for i in range(size)]
    return coords


def _reduce(placement: Placement, parts: list[torch.Tensor]) -> torch.Tensor:
    import torch

    if placement.kind == "shard":
        dim = placement.dim if placement.dim >= 0 else placement.dim + parts[0].dim()
        return torch.cat(parts, dim=dim)
    if placement.kind == "replicate":
        return parts[0]
    stacked = torch.stack(parts)
    return {"sum": stacked.sum, "avg": stacked.mean, "max": stacked.amax, "min": stacked.amin}[placement.op](0)


def assemble(pieces: Mapping[Coord, torch.Tensor], placements: Sequence[Placement], mesh_shape: Sequence[int]
             ) -> torch.Tensor:
    """The whole tensor from every mesh coordinate's local piece (all coordinates must be there)."""
    level: dict[Coord, torch.Tensor] = dict(pieces)
    for dim in reversed(range(len(mesh_shape))):
        groups: dict[Coord, list[tuple[int, torch.Tensor]]] = {}
        for coord, tensor in level.items():
            groups.setdefault(coord[:dim], []).append((coord[dim], tensor))
        level = {outer: _reduce(placements[dim], [t for _, t in sorted(members, key=lambda m: m[0])])
                 for outer, members in groups.items()}
    return level[()]


def expected_piece(reference: torch.Tensor, placements: Sequence[Placement], mesh_shape: Sequence[int],
                   coord: Coord) -> torch.Tensor | None:
    """The piece of ``reference`` the rank at ``coord`` should hold; None under a Partial placement.

    Shards follow DTensor: ``torch.chunk`` sizes, mesh dimension 0 first, empty past the last chunk.
    """
    piece = reference
    for size, placement, index in zip(mesh_shape, placements, coord):
        if placement.kind == "partial":
            return None
        if placement.kind == "shard":
            dim = placement.dim if placement.dim >= 0 else placement.dim + piece.dim()
            chunks = piece.chunk(size, dim=dim)
            piece = chunks[index] if index < len(chunks) else piece.narrow(dim, 0, 0)
    return piece


def wrong_pieces(pieces: Mapping[int, torch.Tensor], expected: Mapping[int, torch.Tensor | None], tol: float
                 ) -> dict[int, float]:
    """Ranks whose piece is further than ``tol`` from what it should be, with that distance."""
    wrong = {}
    for rank, piece in pieces.items():
        want = expected.get(rank)
        if want is not None:
            diff = max_abs_diff(piece, want)
            if not diff <= tol:
                wrong[rank] = diff
    return wrong


class Inferred(NamedTuple):
    """How plain pieces were put together: the tensor (None when no rule fits), the rule, and why."""

    tensor: torch.Tensor | None
    rule: str | None
    note: str = ""


def infer(pieces: Sequence[torch.Tensor], reference: torch.Tensor, tol: float) -> Inferred:
    """Put rank-ordered plain pieces of ``reference`` together by the rule their shapes and values show."""
    import torch

    shape = tuple(reference.shape)
    shapes = [tuple(p.shape) for p in pieces]
    if any(len(s) != len(shape) for s in shapes):
        return Inferred(None, None, f"the ranks hold {_shapes(shapes)}, the reference {list(shape)}")
    differing = sorted({d for s in shapes for d in range(len(shape)) if s[d] != shape[d]})
    if not differing:
        return _replicate_or_partial(list(pieces), reference, tol)
    if len(differing) == 1 and sum(s[differing[0]] for s in shapes) == shape[differing[0]]:
        return Inferred(torch.cat(list(pieces), dim=differing[0]), f"Shard({differing[0]})")
    return Inferred(None, None, f"the ranks' pieces {_shapes(shapes)} do not tile the reference's {list(shape)}")


def tiles(shapes: Sequence[tuple[int, ...]], shape: tuple[int, ...]) -> bool:
    """True when plain pieces of these shapes can make ``shape`` by a rule ``infer`` knows."""
    if any(len(s) != len(shape) for s in shapes):
        return False
    differing = {d for s in shapes for d in range(len(shape)) if s[d] != shape[d]}
    if len(differing) > 1:
        return False
    return not differing or sum(s[d] for s in shapes for d in differing) == shape[differing.pop()]


def _replicate_or_partial(pieces: list[torch.Tensor], reference: torch.Tensor, tol: float) -> Inferred:
    """Same-shape pieces: every piece is the reference (Replicate), or their sum is (Partial(sum)).

    When neither holds, a difference must still be reported, under the rule that explains the pieces
    best: Replicate when some ranks do hold the reference or all ranks agree with each other (their
    copies are what is wrong), else the rule that comes closer.
    """
    import torch

    copies = [max_abs_diff(p, reference) for p in pieces]
    summed = torch.stack(pieces).sum(0)
    sum_diff = max_abs_diff(summed, reference)
    if all(d <= tol for d in copies):
        return Inferred(pieces[0], REPLICATE)
    if sum_diff <= tol:
        return Inferred(summed, PARTIAL_SUM)
    if any(d <= tol for d in copies):
        return Inferred(pieces[copies.index(min(copies))], REPLICATE, "some ranks' copies differ")
    if all(max_abs_diff(p, pieces[0]) <= tol for p in pieces):
        return Inferred(pieces[0], REPLICATE, "every rank holds the same copy, and it differs")
    if min(copies) <= sum_diff:
        return Inferred(pieces[copies.index(min(copies))], REPLICATE, "neither rule fits; Replicate comes closer")
    return Inferred(summed, PARTIAL_SUM, "neither rule fits; Partial(sum) comes closer")


def _shapes(shapes: Sequence[tuple[int, ...]]) -> str:
    distinct = sorted(set(shapes))
    return str([list(s) for s in distinct]) if len(distinct) > 1 else f"{list(distinct[0])} each"
