"""What rounding can and cannot produce: the statistics of a difference ``b - a`` between two tensors.

Rounding differences are small (of the order of the unit roundoff ``u`` of the dtype,
relative to the values), unbiased and incoherent (not aligned with the values, not
concentrated in some rows or columns). A bug is large or coherent:

- ``rel``: the relative RMS difference ``‖b − a‖ / ‖a‖``; ``ulps`` is it in units of ``u``;
- ``scale``: the least-squares ``β`` in ``b − a ≈ β·a`` (b a scaled copy of a), and
  ``scale_z`` = β over its standard error, robust to errors shared along a row or a
  column (a rounded normaliser scales a whole row: rounding, yet coherent);
- ``row_z``: the same fit per row (token), the squared z-scores summed and standardised (a
  chi-square as a z-score): a per-row statistic rounded in the model dtype shows there;
- ``value_z`` and ``trend``: the difference binned by the reference value (an
  approximation of a function, GELU tanh vs exact, is a function of the value), with
  elements of equal reference value as clusters (rounding a value is deterministic).

Padding positions hold garbage in any implementation (eager and sdpa attention fill
fully masked rows differently), so rows outside the model's 2-D attention mask are
left out (``padding_rows``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...core.dtypes import short_dtype
from ...core.trace import Trace

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

    from ...core.node import Node
    from ..align.flow import Flow, TensorCache
    from .metrics import TensorDiff

#: unit roundoff (half the distance from 1 to the next number) of each float dtype
UNIT_ROUNDOFF: dict[str, float] = {
    "float64": 2.0**-53,
    "float32": 2.0**-24,
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
    "float8_e4m3fn": 2.0**-4,
    "float8_e5m2": 2.0**-3,
}
_NAMES = {2.0**-8: "bfloat16", 2.0**-11: "float16", 2.0**-24: "float32", 2.0**-53: "float64"}
_VALUE_BINS = 16
_MIN_GROUP = 4  # a row or value bin needs this many differing elements (or distinct values) to count


def unit_roundoff(*dtypes: object) -> float:
    """The coarsest unit roundoff among ``dtypes`` (``"torch.bfloat16"``, ``torch.float16``; integers: 0)."""
    return max((UNIT_ROUNDOFF.get(short_dtype(str(d)), 0.0) for d in dtypes), default=0.0)


def dtype_name(u: float) -> str:
    """The dtype whose unit roundoff is ``u`` ("bfloat16"), for sentences."""
    return _NAMES.get(u, f"u={u:.3g}")


@dataclass
class DiffStats:
    """How ``b`` differs from the reference ``a`` (see the module docstring)."""

    n: int
    rel: float
    u: float
    scale: float
    scale_z: float
    row_z: float
    value_z: float
    trend: float  # size of the value-binned mean difference, relative to ‖a‖

    @property
    def ulps(self) -> float:
        """``rel`` in units of ``u``."""
        if self.u > 0:
            return self.rel / self.u
        return 0.0 if self.rel == 0 else math.inf


class PairStats:
    """The difference statistics of every pair of full tensors, measured as the comparison loads them (one pass
    over the files), keyed by a's call, io and argument name."""

    def __init__(self, valid_rows: torch.Tensor | None, flow: Flow | None = None) -> None:
        self.valid_rows = valid_rows
        self.flow = flow  # a's data flow: tensors a merely hands on again are measured only when needed
        self.found: dict[tuple[int, str, str], DiffStats] = {}

    def record(self, node: Node, diff: TensorDiff, a: torch.Tensor, b: torch.Tensor) -> None:
        if a.shape != b.shape or a.ndim == 0 or a.numel() == 0 or a.is_complex() or b.is_complex():
            return
        if self.flow is not None:
            slot = self.flow.slot(node, diff.io, diff.arg)
            if slot is not None and slot.origin is not None:
                return
        floats = a.is_floating_point() and b.is_floating_point()
        if floats and self.valid_rows is not None and a.ndim >= 3 and tuple(a.shape[:2]) == tuple(
                self.valid_rows.shape):
            _real_token_numbers(diff, a, b, self.valid_rows)
        u = unit_roundoff(a.dtype, b.dtype) if floats else 0.0
        self.found[(id(node), diff.io, diff.arg)] = diff_stats(a, b, self.valid_rows, u)


def _real_token_numbers(diff: TensorDiff, a: torch.Tensor, b: torch.Tensor, valid_rows: torch.Tensor) -> None:
    """max_abs, max_rel and cosine over the real tokens: padding holds whatever each kernel left there."""
    import numpy as np

    x, y = as_matrix(a, valid_rows).numpy().reshape(-1), as_matrix(b, valid_rows).numpy().reshape(-1)
    both = np.isfinite(x) & np.isfinite(y)
    if diff.ok is False and diff.problem is not None or not both.any():
        return
    x, y = x[both], y[both]
    delta, scale = float(np.abs(x - y).max()), float(np.abs(x).max())
    diff.max_abs = delta
    diff.max_rel = delta / scale if scale > 0 else (0.0 if delta == 0 else math.inf)
    norms = _norm(x) * _norm(y)
    diff.cosine = max(-1.0, min(1.0, float((x * y).sum()) / norms)) if norms > 0 else (1.0 if delta == 0 else None)
    diff.excess = diff.max_rel


def padding_rows(trace: Trace, cache: TensorCache) -> torch.Tensor | None:
    """The ``(batch, seq)`` attention mask the model was called with (True: a real token), or None."""
    for io, arg, tensor in trace.root.tensors():
        if io == "input" and arg.endswith("attention_mask") and len(tensor.shape) == 2:
            mask = cache.load(tensor)
            if mask is not None:
                return mask != 0
    return None


def as_matrix(x: torch.Tensor, valid_rows: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` as float64 (rows x last dimension); rows of padding (``valid_rows`` matching the first two
    dimensions) are dropped."""
    import torch

    x = x.detach().to(torch.float64)
    if x.ndim == 0:
        return x.reshape(1, 1)
    if valid_rows is not None and x.ndim >= 3 and tuple(x.shape[:2]) == tuple(valid_rows.shape):
        return x[valid_rows].reshape(-1, x.shape[-1])
    return x.reshape(-1, x.shape[-1])


def relative(a: torch.Tensor, b: torch.Tensor, valid_rows: torch.Tensor | None = None) -> float:
    """``‖b − a‖ / ‖a‖`` over finite, non-padding elements (inf when a is zero and b is not)."""
    import torch

    x, y = as_matrix(a, valid_rows), as_matrix(b, valid_rows)
    finite = torch.isfinite(x) & torch.isfinite(y)
    delta = float(torch.where(finite, y - x, 0.0).norm())
    norm = float(torch.where(finite, x, 0.0).norm())
    return delta / norm if norm > 0 else (0.0 if delta == 0 else math.inf)


def diff_stats(a: torch.Tensor, b: torch.Tensor, valid_rows: torch.Tensor | None = None,
               u: float | None = None) -> DiffStats:
    """Statistics of ``b − a`` (same shape); ``u`` defaults to the coarser dtype's unit roundoff.

    Computed with numpy: most traced tensors are small, and numpy's per-operation cost is a
    fraction of torch's (20,000 calls compare in a few seconds less).
    """
    import numpy as np

    if u is None:
        u = unit_roundoff(a.dtype, b.dtype)
    x, y = as_matrix(a, valid_rows).numpy(), as_matrix(b, valid_rows).numpy()
    if np.array_equal(x, y):
        return DiffStats(n=x.size, rel=0.0, u=u, scale=0.0, scale_z=0.0, row_z=0.0, value_z=0.0, trend=0.0)
    finite = np.isfinite(x) & np.isfinite(y)
    x, y = np.where(finite, x, 0.0), np.where(finite, y, 0.0)
    delta = y - x
    norm_a, norm_d = _norm(x), _norm(delta)
    rel = norm_d / norm_a if norm_a > 0 else (0.0 if norm_d == 0 else math.inf)
    beta, z = _scale(delta, x)
    value_z, trend = _value_z(delta, x)
    return DiffStats(n=x.size, rel=rel, u=u, scale=beta, scale_z=z, row_z=_row_z(delta, x),
                     value_z=value_z, trend=trend)


def _row_z(delta: np.ndarray, a: np.ndarray) -> float:
    """A scale fitted per row; the squared z-scores of the rows with enough differing elements, summed and
    standardised."""
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):
        aa = np.maximum((a * a).sum(1), 1e-300)
        beta = (delta * a).sum(1) / aa
        resid = delta - beta[:, None] * a
        se = np.sqrt(((resid * a) ** 2).sum(1)) / aa
        z = np.where(se > 0, beta / np.maximum(se, 1e-300), np.where(beta == 0, 0.0, np.inf))
    z = z[(delta != 0).sum(1) >= _MIN_GROUP]
    if z.size == 0:
        return 0.0
    total = float((np.clip(z, -1e6, 1e6) ** 2).sum())
    return (total - z.size) / math.sqrt(2 * z.size)


def _value_z(delta: np.ndarray, a: np.ndarray) -> tuple[float, float]:
    """Bins of the reference value; per bin the mean difference against its cluster-robust standard error.

    Returns the chi-square z over bins and the size of the binned trend (the RMS of the bin
    means over all elements, relative to ``‖a‖``). Elements of equal reference value form one
    cluster: rounding a value is deterministic, so repeats of a value repeat its error.
    """
    import numpy as np

    flat_a, flat_d = a.reshape(-1), delta.reshape(-1)
    n = flat_a.size
    norm_a = _norm(flat_a)
    if n < 4 * _VALUE_BINS or norm_a == 0:
        return 0.0, 0.0
    order = np.argsort(flat_a, kind="stable")
    values, d = flat_a[order], flat_d[order]
    bins = np.repeat(np.arange(_VALUE_BINS), [len(c) for c in np.array_split(np.arange(n), _VALUE_BINS)])
    starts = np.ones(n, dtype=bool)
    starts[1:] = (values[1:] != values[:-1]) | (bins[1:] != bins[:-1])
    cluster = np.cumsum(starts) - 1
    count = np.bincount(bins, minlength=_VALUE_BINS).astype(float)
    differing = np.bincount(bins, weights=(d != 0).astype(float), minlength=_VALUE_BINS)
    clusters = np.bincount(bins[starts], minlength=_VALUE_BINS).astype(float)
    mean = np.bincount(bins, weights=d, minlength=_VALUE_BINS) / count
    sums = np.bincount(cluster, weights=d - mean[bins])
    spread = np.sqrt(np.bincount(bins[starts], weights=sums * sums, minlength=_VALUE_BINS))
    se = spread / count * np.sqrt(clusters / np.maximum(clusters - 1, 1))
    keep = (differing >= _MIN_GROUP) & (clusters >= _MIN_GROUP)
    if not keep.any():
        return 0.0, 0.0
    z = np.where(se > 0, mean / np.maximum(se, 1e-300), 0.0)[keep]
    trend = math.sqrt(float((mean[keep] ** 2 * count[keep]).sum())) / norm_a
    return (float((z * z).sum()) - z.size) / math.sqrt(2 * z.size), trend


def _norm(values: np.ndarray) -> float:
    """The 2-norm without BLAS (numpy's BLAS may run threads of its own, which only contend on small tensors)."""
    return math.sqrt(float((values * values).sum()))


def _scale(delta: np.ndarray, a: np.ndarray) -> tuple[float, float]:
    """Global scale beta and its z-score, the standard error robust to errors shared along rows or columns."""
    aa = float((a * a).sum())
    if aa == 0:
        return 0.0, 0.0
    beta = float((delta * a).sum()) / aa
    score = (delta - beta * a) * a
    se = max(_norm(score), _norm(score.sum(1)), _norm(score.sum(0))) / aa
    if se == 0:
        return beta, 0.0 if beta == 0 else math.inf
    return beta, beta / se
