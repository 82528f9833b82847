"""One tensor held with its axes in another order: b's values read in a's layout.

A channels-first library holds an image's activations ``[N, C, H, W]`` where its channels-last port holds
``[N, H, W, C]`` (timm's ConvNeXt against transformers'), and attention code holds heads before or after the
sequence. The values are the same tensor; comparing them element by element needs b's axes moved to a's order.

The order is found from the shapes (``signs.permutes``: the same sizes longer than one, three or more of them),
each of a's axes taken by the first unused axis of b of its size (a layout change keeps axes of one size in their
order: ``[N, C, H, W]`` against ``[N, H, W, C]`` is ``(0, 3, 1, 2)`` even where ``N == H``). Where axes of one size
repeat, the shapes alone cannot tell which is which (ConvNeXt's first stage: ``[2, 16, 16, 16]`` in both layouts),
so ``closest`` reads b in every order of its equal axes and keeps the one whose values are nearest a's: a port's
values are a's up to rounding in the right order only. Equal shapes are read as they are unless that reading is
further from a's values than a's own norm (values no nearer than unrelated ones): only then is another order tried.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from ...capture.twin.signs import permutes

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: at most this many orders are tried for one pair (four axes of one size: 24)
_MOST_ORDERS = 24


def _long(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(n for n in shape if n != 1)


def axis_order(shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The order of b's axes longer than one that holds a's (``b.squeeze().permute(order)`` has a's shape without its
    ones), each of a's axes taken by the first unused axis of b of its size; None where the shapes are not one
    tensor's axes in another order (equal shapes included: nothing to move)."""
    if tuple(shape_a) == tuple(shape_b) or not permutes(tuple(shape_a), tuple(shape_b)):
        return None
    long_a, long_b = _long(tuple(shape_a)), _long(tuple(shape_b))
    used: set[int] = set()
    order = []
    for size in long_a:
        k = next(i for i, n in enumerate(long_b) if n == size and i not in used)
        used.add(k)
        order.append(k)
    return tuple(order)


def same_values(shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> bool:
    """Whether two shapes of one element count hold the same values read in a's layout: equal without their sizes
    one (``[N, C, 1, 1]`` against ``[N, C]``: a flattened pooling, the same flat order), or the same axes in another
    order (``axis_order``)."""
    return _long(tuple(shape_a)) == _long(tuple(shape_b)) or axis_order(shape_a, shape_b) is not None


def in_layout(y: torch.Tensor, shape_a: tuple[int, ...], order: tuple[int, ...] | None = None) -> torch.Tensor:
    """``y`` (b's tensor) read in a's layout: its axes longer than one moved by ``order`` (``axis_order``'s when
    None; a plain reshape where there is none), then shaped as a's."""
    if order is None:
        order = axis_order(tuple(shape_a), tuple(y.shape))
    if order is None:
        return y.reshape(shape_a)
    return y.reshape(_long(tuple(y.shape))).permute(order).reshape(shape_a)


def orders(shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> list[tuple[int, ...] | None]:
    """Every order of b's axes that gives a's shape: ``axis_order``'s first (None for equal shapes: as it is), then
    those that exchange axes of one size among themselves; only where three or more axes are longer than one (a
    matrix's rows and columns are not another layout of it)."""
    long_a, long_b = _long(tuple(shape_a)), _long(tuple(shape_b))
    if not permutes(tuple(shape_a), tuple(shape_b)):
        return [None]
    first = axis_order(shape_a, shape_b) or tuple(range(len(long_b)))
    groups: dict[int, list[int]] = {}
    for position, size in enumerate(long_a):
        groups.setdefault(size, []).append(position)
    repeated = [positions for positions in groups.values() if len(positions) > 1]
    found: list[tuple[int, ...] | None] = [None if tuple(shape_a) == tuple(shape_b) else first]
    for shuffles in itertools.product(*(itertools.permutations(p) for p in repeated)):
        order = list(first)
        for positions, shuffled in zip(repeated, shuffles):
            for place, source in zip(positions, shuffled):
                order[place] = first[source]
        if tuple(order) not in (first, *found) and len(found) < _MOST_ORDERS:
            found.append(tuple(order))
    return found


def closest(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``y`` (b's tensor, float64) read in a's layout, in the order of its equal axes whose values are nearest
    ``x`` (a's tensor, float64): the first order where several are as near."""
    return in_layout(y, tuple(x.shape), nearest_order(x, y))


def nearest_order(x: torch.Tensor, y: torch.Tensor) -> tuple[int, ...] | None:
    """The order ``closest`` reads ``y`` in (None: as it is)."""
    candidates = orders(tuple(x.shape), tuple(y.shape))
    if len(candidates) == 1:
        return candidates[0]
    best, best_distance = None, None
    for order in candidates:
        distance = _distance(in_layout(y, tuple(x.shape), order), x)
        if best_distance is None:
            if order is None and distance <= _distance(x, 0.0 * x):
                return None  # equal shapes read as they are, nearer than a's own norm: no other layout
        if best_distance is None or distance < best_distance:
            best, best_distance = order, distance
    return best


def printed_in_a_layout(shape_a: tuple[int, ...], shape_b: tuple[int, ...], xs: tuple, ys: tuple) -> tuple | None:
    """b's printed corners ``ys`` (values, last-digit units) in the order of a's ``xs``: torch prints the first and
    last three of every axis longer than six where a tensor holds more than 1000 elements, so the corners of one
    tensor in two layouts are the same elements, each axis's printed ones moved with it; None where the printouts
    do not hold the grid the shapes say."""
    import torch

    summarized = math.prod(shape_b) > 1000
    grid_a = [min(n, 6) if summarized else n for n in shape_a]
    grid_b = [min(n, 6) if summarized else n for n in shape_b]
    if math.prod(grid_a) != xs[0].size or math.prod(grid_b) != ys[0].size or xs[0].size != ys[0].size:
        return None
    x = torch.tensor(xs[0]).reshape(grid_a).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    values = torch.tensor(ys[0]).reshape(grid_b)
    order = nearest_order(x, values.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0))
    if order is None and tuple(grid_a) != tuple(grid_b):
        order = axis_order(tuple(grid_a), tuple(grid_b))
    moved = [in_layout(torch.tensor(t).reshape(grid_b), tuple(grid_a), order).reshape(-1).numpy()
             for t in ys]
    return moved[0], moved[1]


def _distance(x: torch.Tensor, y: torch.Tensor) -> float:
    return float((x - y).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).square().sum())


def in_a_layout(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """b's tensor ``y`` shaped as a's ``x``: reshaped where the shapes are one (up to leading ones), else read in the
    order of its axes nearest ``x`` (``closest``), in float64 where axes of one size had to be told apart."""
    import torch

    if len(orders(tuple(x.shape), tuple(y.shape))) == 1:
        return in_layout(y, tuple(x.shape)) if tuple(x.shape) != tuple(y.shape) else y
    if x.is_complex() or y.is_complex():
        return y.reshape(x.shape)
    return closest(x.detach().to(torch.float64), y.detach().to(torch.float64))
