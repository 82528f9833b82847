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

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from .noise import DiffStats, as_matrix

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
    over the positions ``rows`` keeps.

    Each numpy or torch call costs microseconds on these small tensors, so the calls are few: one stack to
    float64, every pair's difference in one product with a matrix of +1/-1 (exact: the other terms are
    zeros), two sums of squares; then plain floats. A NaN or an inf (the products would spread it to other
    pairs) sends the pairs through an element-by-element pass that leaves them out, as ``diff_stats`` does.
    """

    def __init__(self, tensors: Sequence[torch.Tensor], pairs: Sequence[tuple[int, int]],
                 rows: Rows | None = None) -> None:
        import numpy as np

        values = torch.stack(list(tensors)).detach().reshape(len(tensors), -1).to(torch.float64).numpy()
        kept = rows(tuple(tensors[0].shape)) if rows is not None else None
        if kept is not None:
            values = values[:, kept]
        self.values, self.pairs, self.size = values, list(pairs), values.shape[1]
        with np.errstate(invalid="ignore", over="ignore"):  # a NaN or inf is measured without it below
            self.delta = _differences(len(tensors), self.pairs) @ values
            squares = np.einsum("ij,ij->i", values, values).tolist()  # every tensor's sum of squares
            differences = np.einsum("ij,ij->i", self.delta, self.delta).tolist()
        self.count = [self.size] * len(self.pairs)
        self.square_a, self.square_b = [squares[i] for i, _ in pairs], [squares[j] for _, j in pairs]
        self.masked: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # pair -> (a, b) without non-finite elements
        if not math.isfinite(sum(squares) + sum(differences)):  # (or an overflow: measured the same way)
            finite = np.isfinite(values)
            for k, (i, j) in enumerate(self.pairs):
                both = finite[i] & finite[j]
                a, b = np.where(both, values[i], 0.0), np.where(both, values[j], 0.0)
                self.masked[k] = (a, b)
                self.count[k] = int(both.sum())
                self.square_a[k], self.square_b[k] = float(np.dot(a, a)), float(np.dot(b, b))
                differences[k] = float(np.dot(b - a, b - a))
        self.norm_a = [math.sqrt(x) for x in self.square_a]
        self.norm_d = [math.sqrt(x) for x in differences]

    def stats(self, pair: int, u: float) -> DiffStats:
        """``noise.diff_stats(a, b, valid_rows, u)`` of one pair."""
        norm_a, norm_d = self.norm_a[pair], self.norm_d[pair]
        root = math.sqrt(max(self.count[pair], 1))
        rel = norm_d / norm_a if norm_a > 0 else (0.0 if norm_d == 0 else math.inf)
        return DiffStats(n=self.size, rel=rel, u=u, rms=norm_d / root, norm=norm_a / root)

    def numbers(self, pair: int) -> tuple[float, float, float | None]:
        """``(max |b − a|, that relative to max |a|, cosine of a and b)`` over the finite elements of one pair."""
        import numpy as np

        if self.size == 0 or self.count[pair] == 0:
            return 0.0, 0.0, None
        i, j = self.pairs[pair]
        a, b = self.masked.get(pair, (self.values[i], self.values[j]))
        delta = float(np.abs(b - a).max()) if pair in self.masked else float(np.abs(self.delta[pair]).max())
        scale = float(np.abs(a).max())
        norms = self.norm_a[pair] * math.sqrt(self.square_b[pair])
        cosine = max(-1.0, min(1.0, float(np.einsum("i,i->", a, b)) / norms)) if norms > 0 else None
        return delta, (delta / scale if scale > 0 else (0.0 if delta == 0 else math.inf)), cosine


@functools.lru_cache(maxsize=64)
def _difference_matrix(count: int, pairs: tuple[tuple[int, int], ...]) -> np.ndarray:
    import numpy as np

    matrix = np.zeros((len(pairs), count))
    for k, (i, j) in enumerate(pairs):
        matrix[k, j] += 1.0
        matrix[k, i] -= 1.0
    return matrix


def _differences(count: int, pairs: list[tuple[int, int]]) -> np.ndarray:
    """The matrix whose product with the stacked tensors gives each pair's ``b − a``."""
    return _difference_matrix(count, tuple(pairs))
