"""The numbers of several tensor pairs of one replayed call, measured in one pass.

A replayed call compares four pairs of tensors of one shape (the reference's output against the
port's, against the port's float64 result, that against the port's own, and against itself rounded
to the dtype). Measured one pair at a time, each pair converts its tensors to float64 again and pays
numpy's and torch's cost per operation a dozen times; on 20,000 small calls that was a third of
replay's time. ``PairSums`` converts each tensor once (``noise.as_matrix``: float64, padding rows
left out), stacks them, and takes every pair's sums at once. Its numbers are those of
``noise.diff_stats`` (each pair over the elements finite on both sides) and of a divergence's
``max_abs``, ``max_rel`` and cosine; ``tests/test_replay_copies.py`` holds them to ``diff_stats``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from ..measure.noise import DiffStats, as_matrix

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


class PairSums:
    """Sums of ``pairs`` ``(i, j)`` of ``tensors`` (all of one shape): ``b = tensors[j]`` against ``a = tensors[i]``."""

    def __init__(self, tensors: Sequence[torch.Tensor], pairs: Sequence[tuple[int, int]],
                 valid_rows: torch.Tensor | None = None) -> None:
        import numpy as np

        values = np.stack([as_matrix(t, valid_rows).numpy().reshape(-1) for t in tensors])
        first, second = [i for i, _ in pairs], [j for _, j in pairs]
        a, b = values[first], values[second]
        finite = np.isfinite(values)
        self.size = values.shape[1]
        if finite.all():
            self.count = np.full(len(pairs), self.size)
        else:
            both = finite[first] & finite[second]
            a, b = np.where(both, a, 0.0), np.where(both, b, 0.0)
            self.count = both.sum(axis=1)
        self.a: np.ndarray = a
        self.b: np.ndarray = b
        self.delta = b - a
        self.norm_a = np.sqrt((a * a).sum(axis=1))
        self.norm_d = np.sqrt((self.delta * self.delta).sum(axis=1))

    def stats(self, pair: int, u: float) -> DiffStats:
        """``noise.diff_stats(a, b, valid_rows, u)`` of one pair."""
        norm_a, norm_d = float(self.norm_a[pair]), float(self.norm_d[pair])
        root = math.sqrt(max(int(self.count[pair]), 1))
        rel = norm_d / norm_a if norm_a > 0 else (0.0 if norm_d == 0 else math.inf)
        return DiffStats(n=self.size, rel=rel, u=u, rms=norm_d / root, norm=norm_a / root)

    def numbers(self, pair: int) -> tuple[float, float, float | None]:
        """``(max |b − a|, that relative to max |a|, cosine of a and b)`` over the finite elements of one pair."""
        import numpy as np

        if self.size == 0 or int(self.count[pair]) == 0:
            return 0.0, 0.0, None
        delta = float(np.abs(self.delta[pair]).max())
        scale = float(np.abs(self.a[pair]).max())
        norms = float(self.norm_a[pair]) * math.sqrt(float((self.b[pair] * self.b[pair]).sum()))
        cosine = max(-1.0, min(1.0, float((self.a[pair] * self.b[pair]).sum()) / norms)) if norms > 0 else None
        return delta, (delta / scale if scale > 0 else (0.0 if delta == 0 else math.inf)), cosine
