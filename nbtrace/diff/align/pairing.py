"""Which tensor of one call compares with which tensor of its counterpart."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from ...core.dtypes import dtype_kind
from ...core.node import Node
from ..measure.layouts import same_values
from ..measure.metrics import TensorDiff, diff_tensors, same_shape

#: measures a pair of full tensors of a's call into a TensorDiff (``full_pairs.FullPairs``)
CallMeasure = Callable[[Node, TensorDiff, Any, Any], None]


def compile_ignore(ignore: str | None) -> re.Pattern[str] | None:
    if ignore is None:
        return None
    try:
        return re.compile(ignore)
    except re.error as exc:
        raise ValueError(f"ignore: bad regular expression {ignore!r}: {exc}") from None


def compare_calls(
    x: Node, y: Node, rtol: float | None, atol: float | None, ignore: re.Pattern[str] | None = None,
    measure: CallMeasure | None = None,
) -> list[TensorDiff]:
    """Pair the tensors of two calls (inputs with inputs, outputs with outputs) and compare each pair.

    Tensors pair by argument name when shapes agree (up to leading size-1 dimensions), else by shape in order,
    within the same kind (float, int, bool); tensors left over are not compared. Integer and bool tensors paired by
    order (other names) pair only where their values agree (``_by_values``): an attention mask against position ids
    is no difference of the port.
    A leaf output with the same name but another number of elements pairs as a shape mismatch; with as many
    elements in another shape it is another layout of values (a convolution's ``[B, C, H, W]`` against a linear
    patch projection's ``[B, H*W, C]``), which the calls that read it judge, and it is not compared; full tensors
    holding the same axes in another order (``[B, C, H, W]`` against ``[B, H, W, C]``) or other sizes one
    (``[B, C, 1, 1]`` against ``[B, C]``) are compared in a's layout, printed ones too (their corners are the same
    elements in another order).
    """
    diffs = []
    full = (lambda d, tx, ty: measure(x, d, tx, ty)) if measure is not None else None
    tensors_x, tensors_y = x.tensors(), y.tensors()
    for io in ("input", "output"):
        mine = [(arg, t) for kind, arg, t in tensors_x if kind == io and not (ignore and ignore.search(arg))]
        theirs = [(arg, t) for kind, arg, t in tensors_y if kind == io and not (ignore and ignore.search(arg))]
        used: set[int] = set()
        for arg, tensor in mine:
            pick = _pick(arg, tensor, theirs, used, io)
            if pick is None:
                continue
            b_arg, other = theirs[pick]
            diff = diff_tensors(io, arg, b_arg, tensor, other, rtol, atol, full=full)
            if diff.ok is False and b_arg != arg and dtype_kind(tensor.dtype) in ("int", "bool"):
                found = _by_values(tensor, theirs, used, pick,
                                   lambda k: diff_tensors(io, arg, theirs[k][0], tensor, theirs[k][1], rtol, atol,
                                                          full=full))
                if found is None:
                    continue
                pick, diff = found
            used.add(pick)
            diffs.append(diff)
    return diffs


def _by_values(tensor: Any, theirs: list, used: set[int], pick: int,
               measure: Callable[[int], TensorDiff]) -> tuple[int, TensorDiff] | None:
    """An integer or bool tensor that order paired with one of another name and other values: the first of b's unused
    tensors of its kind and shape whose values agree, else None: order alone decides nothing (a mask against
    position ids; token ids under two names that differ leave the call that reads them to show it)."""
    kind = dtype_kind(tensor.dtype)
    for k, (_, other) in enumerate(theirs):
        if k != pick and k not in used and dtype_kind(other.dtype) == kind and same_shape(other.shape, tensor.shape):
            found = measure(k)
            if found.ok is True:
                return k, found
    return None


def _pick(arg, tensor, theirs, used, io) -> int | None:
    kind = dtype_kind(tensor.dtype)
    fallback = None
    by_name = None
    permuted = None
    for k, (b_arg, other) in enumerate(theirs):
        if k in used or dtype_kind(other.dtype) != kind:
            continue
        if same_shape(other.shape, tensor.shape):
            if b_arg == arg:
                return k
            if fallback is None:
                fallback = k
        elif b_arg == arg and by_name is None and math.prod(other.shape) != math.prod(tensor.shape):
            by_name = k
        elif (permuted is None or b_arg == arg != theirs[permuted][0]) and same_values(tensor.shape, other.shape) \
                and (tensor.ref is not None and other.ref is not None or tensor.lines and other.lines):
            permuted = k  # full or printed tensors of the same axes in another order: compared in a's layout
    if fallback is not None:
        return fallback
    if permuted is not None:
        return permuted
    if io == "output" and by_name is not None:
        return by_name
    return None
