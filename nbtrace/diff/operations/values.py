"""Whether two float64 outputs hold the same values, up to layout: a ``view`` for a ``reshape``, a transpose
before or after a ``contiguous``, a broadcast dimension kept or expanded.

Elements a mask filled with a huge value (``finfo.min``) must sit at the same places and are left out of the
difference, so a mask does not hide the values beside it.
"""

from __future__ import annotations

import torch

HUGE = 1e30  # a value this large is a mask's fill, not a result
SAME, PERMUTED = "same", "permuted"


def rms(x: torch.Tensor) -> float:
    """The RMS of the regular (finite, not huge) values of ``x`` (0 for none)."""
    keep = torch.isfinite(x) & (x.abs() < HUGE)
    return float(x[keep].square().mean().sqrt()) if bool(keep.any()) else 0.0


def _difference(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """Relative RMS difference of two flat tensors of one length; None when their masks differ."""
    mask_a, mask_b = ~(torch.isfinite(a) & (a.abs() < HUGE)), ~(torch.isfinite(b) & (b.abs() < HUGE))
    if not torch.equal(mask_a, mask_b):
        return None
    keep = ~mask_a
    if not bool(keep.any()):
        return 0.0
    a, b = a[keep], b[keep]
    scale = max(float(a.square().mean().sqrt()), float(b.square().mean().sqrt()))
    diff = float((a - b).square().mean().sqrt())
    return diff / scale if scale > 0 else diff


def _flat_pair(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    if a.numel() == b.numel():
        return a.reshape(-1), b.reshape(-1)
    try:
        if a.numel() < b.numel():
            return torch.broadcast_to(a, b.shape).reshape(-1), b.reshape(-1)
        return a.reshape(-1), torch.broadcast_to(b, a.shape).reshape(-1)
    except RuntimeError:
        return None


def distance(a: torch.Tensor, b: torch.Tensor) -> tuple[float, str] | None:
    """How far apart ``a`` and ``b`` are (relative RMS) in their element order, and ``"same"``; None when
    they cannot be laid on each other."""
    pair = _flat_pair(a, b)
    if pair is None:
        return None
    d = _difference(*pair)
    return None if d is None else (d, SAME)


def permuted_distance(a: torch.Tensor, b: torch.Tensor) -> tuple[float, str] | None:
    """The distance of their sorted values (``"permuted"``: the same values in another layout)."""
    if a.numel() != b.numel():
        return None
    d = _difference(torch.sort(a.reshape(-1)).values, torch.sort(b.reshape(-1)).values)
    return None if d is None else (d, PERMUTED)


def degenerate(x: torch.Tensor) -> bool:
    """Whether ``x`` holds fewer than two distinct regular values (it would match too much)."""
    keep = torch.isfinite(x) & (x.abs() < HUGE)
    values = x[keep]
    return values.numel() < 2 or float(values.max() - values.min()) == 0.0
