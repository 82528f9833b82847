"""Shapes of one tensor in two layouts: heads split or merged (``[B, T, N, H]`` against ``[B, T, N*H]``)."""

from __future__ import annotations

import math
from collections.abc import Sequence


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
