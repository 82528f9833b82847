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

from ..core.dtypes import short_dtype
from ..core.trace import Trace

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from .flow import TensorCache

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
    """Statistics of ``b − a`` (same shape); ``u`` defaults to the coarser dtype's unit roundoff."""
    import torch

    if u is None:
        u = unit_roundoff(a.dtype, b.dtype)
    x, y = as_matrix(a, valid_rows), as_matrix(b, valid_rows)
    finite = torch.isfinite(x) & torch.isfinite(y)
    x, y = torch.where(finite, x, 0.0), torch.where(finite, y, 0.0)
    delta = y - x
    norm_a, norm_d = float(x.norm()), float(delta.norm())
    rel = norm_d / norm_a if norm_a > 0 else (0.0 if norm_d == 0 else math.inf)
    beta, z = _scale(delta, x)
    value_z, trend = _value_z(delta, x)
    _, row_z, row_keep = _group_z(delta, x, 1)
    return DiffStats(n=x.numel(), rel=rel, u=u, scale=beta, scale_z=z, row_z=_chi_z(row_z, row_keep),
                     value_z=value_z, trend=trend)


def _group_z(delta: torch.Tensor, a: torch.Tensor, dim: int):
    """Per-group scale fit along ``dim`` (the other dimension indexes groups): beta, z, and who counts."""
    import torch

    aa = (a * a).sum(dim)
    beta = (delta * a).sum(dim) / aa.clamp_min(1e-300)
    resid = delta - beta.unsqueeze(dim) * a
    se = ((resid * a) ** 2).sum(dim).sqrt() / aa.clamp_min(1e-300)
    counts = (delta != 0).sum(dim)
    z = torch.where(se > 0, beta / se.clamp_min(1e-300), torch.where(beta == 0, 0.0, math.inf))
    return beta, z, counts >= _MIN_GROUP


def _chi_z(z: torch.Tensor, keep: torch.Tensor) -> float:
    z = z[keep]
    k = z.numel()
    if k == 0:
        return 0.0
    total = float((z.clamp(-1e6, 1e6) ** 2).sum())
    return (total - k) / math.sqrt(2 * k)


def _value_z(delta: torch.Tensor, a: torch.Tensor) -> tuple[float, float]:
    """Bins of the reference value; per bin the mean difference against its cluster-robust standard error.

    Returns the chi-square z over bins and the size of the binned trend (the RMS of the bin
    means over all elements, relative to ‖a‖).
    """
    import torch

    flat_a, flat_d = a.reshape(-1), delta.reshape(-1)
    norm_a = float(flat_a.norm())
    if flat_a.numel() < 4 * _VALUE_BINS or norm_a == 0:
        return 0.0, 0.0
    order = torch.argsort(flat_a)
    zs = []
    trend = 0.0
    for chunk in torch.tensor_split(order, _VALUE_BINS):
        d = flat_d[chunk]
        if int((d != 0).sum()) < _MIN_GROUP:
            continue
        _, cluster = torch.unique(flat_a[chunk], return_inverse=True)
        k = int(cluster.max()) + 1
        if k < _MIN_GROUP:
            continue
        mean = float(d.mean())
        trend += mean * mean * d.numel()
        sums = torch.zeros(k, dtype=d.dtype).index_add_(0, cluster, d - mean)
        se = float(sums.norm()) / d.numel() * math.sqrt(k / (k - 1))
        zs.append(mean / se if se > 0 else 0.0)
    if not zs:
        return 0.0, 0.0
    return (sum(z * z for z in zs) - len(zs)) / math.sqrt(2 * len(zs)), math.sqrt(trend) / norm_a


def _scale(delta: torch.Tensor, a: torch.Tensor) -> tuple[float, float]:
    """Global scale beta and its z-score, the standard error robust to errors shared along rows or columns."""
    aa = float((a * a).sum())
    if aa == 0:
        return 0.0, 0.0
    beta = float((delta * a).sum()) / aa
    score = (delta - beta * a) * a
    se = max(float(score.norm()), float(score.sum(1).norm()), float(score.sum(0).norm())) / aa
    if se == 0:
        return beta, 0.0 if beta == 0 else math.inf
    return beta, beta / se
