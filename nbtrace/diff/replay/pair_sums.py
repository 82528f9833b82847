"""The numbers of several tensor pairs of one replayed call, measured in one pass.

A replayed call compares four pairs of tensors of one shape (the reference's output against the
port's, against the port's float64 result, that against the port's own, and against itself rounded
to the dtype). Measured one pair at a time, each pair converts its tensors to float64 again and pays
numpy's and torch's cost per operation a dozen times; on 20,000 small calls that was a third of
replay's time. ``PairSums`` stacks the tensors as float64 once, leaves out the padding rows that
``noise.as_matrix`` leaves out (``Rows``: their positions found once per shape), and takes every
pair's sums at once. Its numbers are those of
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


class Rows:
    """The flat positions of a tensor of a given shape that ``noise.as_matrix`` keeps (padding rows left out),
    found once per shape by applying ``as_matrix`` to the positions themselves; None: all of them."""

    def __init__(self, valid_rows: torch.Tensor | None = None) -> None:
        self.valid_rows = valid_rows
        self._kept: dict[tuple[int, ...], np.ndarray | None] = {}

    def __call__(self, shape: tuple[int, ...]) -> np.ndarray | None:
        import numpy as np

        if self.valid_rows is None:
            return None
        if shape not in self._kept:
            count = math.prod(shape)
            positions = torch.arange(count, dtype=torch.float64).reshape(shape)
            kept = as_matrix(positions, self.valid_rows).reshape(-1).numpy().astype(np.int64)
            self._kept[shape] = None if kept.size == count else kept  # kept in order: all of them or fewer
        return self._kept[shape]


class PairSums:
    """Sums of ``pairs`` ``(i, j)`` of ``tensors`` (all of one shape): ``b = tensors[j]`` against ``a = tensors[i]``,
    over the positions ``rows`` keeps."""

    def __init__(self, tensors: Sequence[torch.Tensor], pairs: Sequence[tuple[int, int]],
                 rows: Rows | None = None) -> None:
        import numpy as np

        # one tensor a row, as float64 (torch widens every dtype exactly, bfloat16 included)
        values = torch.cat([t.detach().reshape(1, -1) for t in tensors]).to(torch.float64).numpy()
        kept = rows(tuple(tensors[0].shape)) if rows is not None else None
        if kept is not None:
            values = values[:, kept]
        first, second = [i for i, _ in pairs], [j for _, j in pairs]
        self.size = values.shape[1]
        a, b = values[first], values[second]
        with np.errstate(invalid="ignore", over="ignore"):  # a NaN or inf is measured without it below
            delta = b - a
            squares = np.einsum("ij,ij->i", values, values)  # every tensor's sum of squares
            differences = np.einsum("ij,ij->i", delta, delta)
            finite = math.isfinite(float(squares.sum() + differences.sum()))
        if finite:  # every element finite (or an overflow: then measured element by element below, as diff_stats)
            self.count = [self.size] * len(pairs)
            self.square_a, self.square_b = squares[first], squares[second]
        else:
            both = np.isfinite(values[first]) & np.isfinite(values[second])
            a, b = np.where(both, a, 0.0), np.where(both, b, 0.0)
            delta = b - a
            self.count = both.sum(axis=1).tolist()
            self.square_a, self.square_b = np.einsum("ij,ij->i", a, a), np.einsum("ij,ij->i", b, b)
            differences = np.einsum("ij,ij->i", delta, delta)
        self.a: np.ndarray = a
        self.b: np.ndarray = b
        self.delta = delta
        self.norm_a = np.sqrt(self.square_a)
        self.norm_d = np.sqrt(differences)

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
        norms = float(self.norm_a[pair]) * math.sqrt(float(self.square_b[pair]))
        dot = float(np.einsum("i,i->", self.a[pair], self.b[pair]))
        cosine = max(-1.0, min(1.0, dot / norms)) if norms > 0 else None
        return delta, (delta / scale if scale > 0 else (0.0 if delta == 0 else math.inf)), cosine

