"""Whether two float64 outputs hold the same values, up to layout: a ``view`` for a ``reshape``, a transpose
before or after a ``contiguous``, a broadcast dimension kept or expanded.

Elements a mask filled with a huge value (``finfo.min``) must sit at the same places and are left out of the
difference, so a mask does not hide the values beside it.
"""

from __future__ import annotations

import torch

HUGE = 1e30  # a value this large is a mask's fill, not a result (``limit``: smaller for float16)
SAME, PERMUTED = "same", "permuted"


def _regular(x: torch.Tensor, limit: float = HUGE) -> torch.Tensor:
    return x.abs() < limit  # False for inf and NaN too


def rms(x: torch.Tensor, limit: float = HUGE) -> float:
    """The RMS of the regular (finite, below ``limit``) values of ``x`` (0 for none)."""
    keep = _regular(x, limit)
    if not bool(keep.all()):
        x = x[keep]
    return float(torch.linalg.vector_norm(x)) / x.numel() ** 0.5 if x.numel() else 0.0


def _difference(a: torch.Tensor, b: torch.Tensor, limit: float) -> float | None:
    """Relative RMS difference of two flat tensors of one length (``b`` brought to ``a``'s device: a reference
    on the CPU, a port on a GPU); None when their masks differ."""
    b = b.to(a.device)
    keep_a, keep_b = _regular(a, limit), _regular(b, limit)
    if not torch.equal(keep_a, keep_b):
        return None
    if not bool(keep_a.all()):
        if not bool(keep_a.any()):
            return 0.0
        a, b = a[keep_a], b[keep_a]
    scale = max(float(torch.linalg.vector_norm(a)), float(torch.linalg.vector_norm(b)))
    diff = float(torch.linalg.vector_norm(a - b))
    return diff / scale if scale > 0 else diff / a.numel() ** 0.5


def _flat_pair(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    if a.numel() == b.numel():
        return a.reshape(-1), b.reshape(-1)
    try:
        if a.numel() < b.numel():
            return torch.broadcast_to(a, b.shape).reshape(-1), b.reshape(-1)
        return a.reshape(-1), torch.broadcast_to(b, a.shape).reshape(-1)
    except RuntimeError:
        return None


def distance(a: torch.Tensor, b: torch.Tensor, limit: float = HUGE) -> tuple[float, str] | None:
    """How far apart ``a`` and ``b`` are (relative RMS) in their element order, and ``"same"``; None when
    they cannot be laid on each other."""
    pair = _flat_pair(a, b)
    if pair is None:
        return None
    d = _difference(*pair, limit)
    return None if d is None else (d, SAME)


def permuted_distance(a: torch.Tensor, b: torch.Tensor, limit: float = HUGE) -> tuple[float, str] | None:
    """The distance of their sorted values (``"permuted"``: the same values in another layout)."""
    if a.numel() != b.numel():
        return None
    d = _difference(torch.sort(a.reshape(-1)).values, torch.sort(b.reshape(-1)).values, limit)
    return None if d is None else (d, PERMUTED)


def degenerate(x: torch.Tensor, limit: float = HUGE) -> bool:
    """Whether ``x`` holds fewer than two distinct regular values (it would match too much)."""
    keep = _regular(x, limit)
    values = x if bool(keep.all()) else x[keep]
    return values.numel() < 2 or bool(values.max() == values.min())
