"""The numbers of a difference ``b - a`` between two tensors, measured, not modelled.

- ``rel``: the relative RMS difference ``‖b − a‖ / ‖a‖``; ``ulps`` is it in units of the
  dtype's unit roundoff ``u`` (what a person reads);
- ``rms``: the absolute RMS difference over the finite elements, and ``norm`` the RMS of ``a``:
  the numbers the measured rules compare (``rounding.py``), as norms obey the triangle
  inequality.

Nothing here decides whether a difference is rounding: that is measured against a float64
truth (``rounding.py``). Padding positions hold garbage in any implementation (eager and sdpa
attention fill fully masked rows differently), so rows outside the model's 2-D attention mask
are left out (``padding_rows``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...core.dtypes import short_dtype
from ...core.trace import Trace
from .metrics import same_shape

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


@functools.lru_cache(maxsize=256)
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
    rms: float = 0.0  # absolute RMS of b - a over the finite elements
    norm: float = 0.0  # RMS of a over the same elements

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

    def wants(self, node: Node, diff: TensorDiff) -> bool:
        """False for a tensor a merely hands on again (measured where it first appeared)."""
        if self.flow is None:
            return True
        slot = self.flow.slot(node, diff.io, diff.arg)
        return slot is None or slot.origin is None

    def record(self, node: Node, diff: TensorDiff, a: torch.Tensor, b: torch.Tensor) -> None:
        """Measure a pair of loaded tensors with torch (``full_pairs.FullPairs`` measures files with numpy)."""
        if not same_shape(a.shape, b.shape) or a.ndim == 0 or a.numel() == 0 or a.is_complex() or b.is_complex():
            return
        b = b.reshape(a.shape)  # equal after broadcasting leading size-1 dimensions
        if not self.wants(node, diff):
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
    """The ``(batch, seq)`` padding mask the model was called with (True: a real token), or None: the input the
    trace's float64 twin recorded it at (``padding_from``), else
    ``capture/twin/padding.py``'s rule on the recorded top-level inputs, whatever their names."""
    from ...capture.twin.padding import holds_mask, padding_candidates
    from ...core.dtypes import dtype_kind

    tensors = {arg: t for io, arg, t in trace.root.tensors() if io == "input"}
    twin = trace.twin
    if twin is not None and twin.padding_from in tensors:
        places, named = [twin.padding_from], True
    else:
        inputs = [(arg, tuple(t.shape), dtype_kind(t.dtype) in ("int", "bool")) for arg, t in tensors.items()]
        places, named = padding_candidates(inputs)
    for place in places:
        mask = cache.load(tensors[place])  # a trace of printed values holds no rows to leave out
        if mask is None or mask.ndim != 2:
            continue
        if named or holds_mask(bool(((mask == 0) | (mask == 1)).all()), bool((mask != 0).any(dim=1).all())):
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


def diff_stats(a: torch.Tensor, b: torch.Tensor, valid_rows: torch.Tensor | None = None,
               u: float | None = None) -> DiffStats:
    """The numbers of ``b − a`` (same shape) over finite, non-padding elements; ``u`` defaults to the coarser
    dtype's unit roundoff. Computed with numpy: most traced tensors are small, and numpy's per-operation cost
    is a fraction of torch's."""
    import numpy as np

    if u is None:
        u = unit_roundoff(a.dtype, b.dtype)
    x, y = as_matrix(a, valid_rows).numpy(), as_matrix(b, valid_rows).numpy()
    finite = np.isfinite(x) & np.isfinite(y)
    count = max(int(finite.sum()), 1)
    x, y = np.where(finite, x, 0.0), np.where(finite, y, 0.0)
    norm_a = _norm(x)
    if np.array_equal(x, y):
        return DiffStats(n=x.size, rel=0.0, u=u, rms=0.0, norm=norm_a / math.sqrt(count))
    norm_d = _norm(y - x)
    rel = norm_d / norm_a if norm_a > 0 else (0.0 if norm_d == 0 else math.inf)
    return DiffStats(n=x.size, rel=rel, u=u, rms=norm_d / math.sqrt(count), norm=norm_a / math.sqrt(count))


def _norm(values: np.ndarray) -> float:
    """The 2-norm without BLAS (numpy's BLAS may run threads of its own, which only contend on small tensors)."""
    return math.sqrt(float((values * values).sum()))
