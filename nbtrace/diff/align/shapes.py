"""Shapes of one tensor in two layouts: heads split or merged (``[B, T, N, H]`` against ``[B, T, N*H]``), or its axes
in another order (``[B, C, H, W]`` against ``[B, H, W, C]``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ...capture.twin.signs import permutes


def same_flat_order(shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> bool:
    """True when one shape is the other with neighbouring dimensions merged or split (equal element counts, and
    every running product of one is a running product of the other), so a view of one is the other."""
    def running(shape: tuple[int, ...]) -> set[int]:
        found, total = set(), 1
        for size in shape:
            total *= size
            found.add(total)
        return found

    if math.prod(shape_a) != math.prod(shape_b):
        return False
    mine, theirs = running(tuple(shape_a)), running(tuple(shape_b))
    return mine <= theirs or theirs <= mine


def same_views(shapes_a: Sequence[tuple[int, ...]], shapes_b: Sequence[tuple[int, ...]]) -> bool:
    """Two lists of shapes, pairwise equal or views of each other (``same_flat_order``)."""
    return len(shapes_a) == len(shapes_b) and all(
        a == b or same_flat_order(a, b) for a, b in zip(shapes_a, shapes_b))


def same_axes(shape_a: tuple[int, ...], shape_b: tuple[int, ...], *prints: object) -> bool:
    """True when the two shapes hold the same axes in another order (channels last against channels first, heads
    before or after the sequence: sizes one aside, three or more axes) and every one of ``prints`` (the two twins'
    fingerprints, when given) holds the layout sums that compare such tensors."""
    return permutes(tuple(shape_a), tuple(shape_b)) and all(getattr(p, "layout", None) is not None for p in prints)
