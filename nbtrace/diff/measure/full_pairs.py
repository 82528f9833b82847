"""Both sides' full tensors measured in one pass: a TensorDiff's numbers and, for the verdict, DiffStats.

A comparison of two 20,000-call traces measures tens of thousands of small tensor pairs,
where torch's cost per operation is most of the time. So each file is read once (the
bytes that fingerprinted it in the data flow), decoded straight to float64 with numpy,
and every number of the pair comes from one set of sums. A pair of tensors whose
contents were measured before (a layer's output read again as the next layer's input,
on both sides) is not measured again, and a pair of identical files costs one side.

The numbers are those of ``metrics.measure_with_torch`` (all elements) and of
``noise.PairStats`` (real tokens only, when the model was called with a padding mask).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...core.dtypes import is_float
from .layouts import in_a_layout, orders
from .metrics import TensorDiff, measure_with_torch, relative_to, same_shape
from .noise import DiffStats, PairStats, unit_roundoff

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from ...core.node import Node
    from ...core.tensor import TensorValue
    from ..align.flow import TensorCache


@dataclass
class Sums:
    """Sums over the elements finite on both sides (``count`` of them); ``mismatch``: a NaN or inf of one side
    meets another value on the other."""

    count: int
    delta: float = 0.0  # max |a - b|
    scale: float = 0.0  # max |a|
    dot: float = 0.0
    xx: float = 0.0
    yy: float = 0.0
    dd: float = 0.0
    mismatch: bool = False

    def cosine(self) -> float | None:
        norms = math.sqrt(self.xx) * math.sqrt(self.yy)
        if norms > 0:
            return max(-1.0, min(1.0, self.dot / norms))
        return 1.0 if self.delta == 0 else None


def sums(x: np.ndarray, y: np.ndarray | None) -> Sums:
    """The sums of two flat float64 arrays of one size (``y`` None: equal to ``x``)."""
    import numpy as np

    finite = np.isfinite(x)
    all_finite = bool(finite.all())
    if y is None:
        xf = x if all_finite else x[finite]
        if xf.size == 0:
            return Sums(0)
        xx = float(np.dot(xf, xf))
        return Sums(int(xf.size), 0.0, float(np.abs(xf).max()), xx, xx, xx, 0.0)
    finite_y = np.isfinite(y)
    mismatch = False
    if all_finite and bool(finite_y.all()):
        xf, yf = x, y
    else:
        both = finite & finite_y
        same_special = (x == y) | (np.isnan(x) & np.isnan(y))
        mismatch = bool((~both & ~same_special).any())
        xf, yf = x[both], y[both]
    if xf.size == 0:
        return Sums(0, mismatch=mismatch)
    d = xf - yf
    return Sums(int(xf.size), float(np.abs(d).max()), float(np.abs(xf).max()), float(np.dot(xf, yf)),
                float(np.dot(xf, xf)), float(np.dot(yf, yf)), float(np.dot(d, d)), mismatch)


class FullPairs:
    """Measures pairs of full tensors of two traces (a's file cache, b's), recording DiffStats in ``stats``
    (None: the TensorDiff numbers only, as with an explicit ``rtol``/``atol``)."""

    def __init__(self, cache_a: TensorCache, cache_b: TensorCache, stats: PairStats | None) -> None:
        self.cache_a, self.cache_b, self.stats = cache_a, cache_b, stats
        self._memo: dict[tuple, tuple[tuple, DiffStats | None]] = {}
        valid = stats.valid_rows if stats is not None else None
        self._valid = valid.numpy() if valid is not None else None  # the real-token rows of (batch, seq)
        self._every_row = self._valid is None or bool(self._valid.all())

    def __call__(self, node: Node, result: TensorDiff, a: TensorValue, b: TensorValue) -> None:
        key_a, key_b = self.cache_a.fingerprint(a), self.cache_b.fingerprint(b)
        memo_key = (key_a, key_b, result.rtol, result.atol)
        found = self._memo.get(memo_key) if key_a is not None and key_b is not None else None
        if found is None:
            found = self._measure(result, a, b, key_a is not None and key_a == key_b)
            if found is None:  # a dtype numpy does not hold: torch's path
                record = self.stats.record if self.stats is not None else None
                measure_with_torch(result, a, b, (lambda d, x, y: record(node, d, x, y)) if record else None)
                return
            if key_a is not None and key_b is not None:
                self._memo[memo_key] = found
        numbers, stats = found
        result.basis = "tensors"
        result.max_abs, result.max_rel, result.cosine, result.excess, result.ok, result.problem = numbers
        if stats is not None and self.stats is not None and self.stats.wants(node, result):
            self.stats.found[(id(node), result.io, result.arg)] = stats

    def _measure(self, result: TensorDiff, a: TensorValue, b: TensorValue, same: bool):
        x = self.cache_a.float64(a)
        y = x if same else self.cache_b.float64(b)
        if x is None or y is None or x.size != y.size:
            return None
        if not same and len(orders(tuple(a.shape), tuple(b.shape))) > 1:  # the same axes, maybe in another order
            import torch

            moved = in_a_layout(torch.from_numpy(x).reshape(tuple(a.shape)),
                                torch.from_numpy(y).reshape(tuple(b.shape)))
            y = moved.reshape(-1).numpy()
        whole = sums(x, None if same else y)
        assert result.rtol is not None and result.atol is not None
        if whole.mismatch:
            numbers = (math.inf, math.inf, None, None, False, "NaN/inf at different places")
        elif whole.count == 0:
            numbers = (0.0, 0.0, None, None, True, None)
        else:
            rel = relative_to(whole.delta, whole.scale)
            numbers = (whole.delta, rel, whole.cosine(), rel, whole.delta <= result.atol + result.rtol * whole.scale,
                       None)
        if self.stats is None or not _measurable(a, b, x):
            return numbers, None
        floats = is_float(a.dtype) and is_float(b.dtype)
        real, rows = whole, self._real_rows(a.shape)
        if rows is not None:
            shape = tuple(a.shape)
            x = x.reshape(shape)[rows].reshape(-1)
            y = x if same else y.reshape(shape)[rows].reshape(-1)
            real = sums(x, None if same else y)
            if floats and not whole.mismatch and real.count:  # padding holds whatever a kernel left there
                rel = relative_to(real.delta, real.scale)
                numbers = (real.delta, rel, real.cosine(), rel, numbers[4], None)
        u = unit_roundoff(a.dtype, b.dtype) if floats else 0.0
        return numbers, _diff_stats(real, x.size, u)

    def _real_rows(self, shape: tuple[int, ...]):
        """A boolean mask of the real-token rows when ``shape`` starts with the padding mask's (batch, seq) and
        some rows are padding; else None (every row counts)."""
        if self._every_row or len(shape) < 3 or tuple(shape[:2]) != self._valid.shape:
            return None
        return self._valid


def _measurable(a: TensorValue, b: TensorValue, x: np.ndarray) -> bool:
    """What ``PairStats`` measures: same shapes (up to leading 1s), not 0-dim, not empty."""
    return same_shape(a.shape, b.shape) and len(a.shape) > 0 and x.size > 0


def _diff_stats(s: Sums, n: int, u: float) -> DiffStats:
    """``noise.diff_stats`` from the sums (non-finite elements count as zeros on both sides)."""
    count = max(s.count, 1)
    norm_a = math.sqrt(s.xx)
    if s.delta == 0:
        return DiffStats(n=n, rel=0.0, u=u, rms=0.0, norm=norm_a / math.sqrt(count))
    norm_d = math.sqrt(s.dd)
    rel = norm_d / norm_a if norm_a > 0 else (0.0 if norm_d == 0 else math.inf)
    return DiffStats(n=n, rel=rel, u=u, rms=norm_d / math.sqrt(count), norm=norm_a / math.sqrt(count))
