"""A BatchNorm at eval from two printed folders without a twin: read from its printed corners, bounded on the sketches.

``sketch_verdict.py`` reads elementwise functions and RMSNorms from a leaf's printed corners. A channels-first image
library's BatchNorm at eval (a leaf holding a gain, a bias, a running mean and a running variance ``[C]``) computes
``y = s_c·x + t_c`` per channel, ``s_c = g_c/√(v_c + eps)``. Where the reference's printed corners are such a map at
every printed channel (a least-squares line through each channel's printed points, every point on it within its
printed digits and the reference's own rounding), its bound on 2-norms (``operation_axes``'s per element, summed by
the triangle inequality) is ``L‖Δx‖ + Σ_sides 6u(L‖x‖ + √n(L·max|μ| + max|b|)) + 2u‖y‖`` with ``L = max|g|/√min(v)``
(eps ≥ 0 only shrinks it) and ``‖Δx‖`` at most what the sketches allow.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..measure import bounds
from ..measure.metrics import printed_arrays

if TYPE_CHECKING:  # pragma: no cover
    from .sketch_verdict import _Pair

NAMES = ("weight", "bias", "running_mean", "running_var")
_SAMPLE_DIGITS = 1e-6


def batch_norm(held: dict[str, dict], x_value, y_value, x: _Pair, y: _Pair, u: float) -> bounds.Bound | None:
    """The bound of a BatchNorm at eval from the sketches (None: the leaf or its corners are not one)."""
    from .operation import _number

    shape = held["weight"].get("shape")
    if set(held) != set(NAMES) or not isinstance(shape, list) or len(shape) != 1 \
            or any(held[n].get("shape") != shape for n in NAMES):
        return None
    if tuple(x_value.shape) != tuple(y_value.shape) or len(x_value.shape) < 2 or x_value.shape[1] != shape[0]:
        return None
    gain, offset, mean = (_number(held[n], "absmax") for n in NAMES[:3])
    low = _number(held["running_var"], "min")
    if gain is None or offset is None or mean is None or low is None or low <= 0:
        return None
    lipschitz = gain / math.sqrt(low) * (1 + _SAMPLE_DIGITS)
    if not _per_channel_affine(x_value, y_value, u, lipschitz, mean, offset):
        return None
    constant = math.sqrt(math.prod(x_value.shape)) * (lipschitz * mean + offset)  # every element, padding too
    allowed = lipschitz * x.at_most + sum(6 * u * (lipschitz * norm_x + constant) + 2 * u * norm_y
                                          for norm_x, norm_y in ((x.norm_a, y.norm_a), (x.norm_b, y.norm_b)))
    return bounds.Bound(y.at_least, allowed, f"BatchNorm (eval) over {shape[0]} channels",
                        "L‖Δx‖ + Σ 6u(L‖x‖ + √n(L·max|μ| + max|b|)) + 2u‖y‖, L = max|g|/√min(v), ‖Δ‖ from the sketches")


def _per_channel_affine(x_value, y_value, u: float, lipschitz: float, mean: float, offset: float) -> bool:
    """Whether the reference's printed ``y`` is, at every printed channel (axis 1), one line ``s·x + t`` of its printed
    ``x`` with ``|s| ≤ L``, within the printed digits and the reference's own rounding."""
    import numpy as np

    xs, ys = printed_arrays(x_value), printed_arrays(y_value)
    if xs is None or ys is None or xs[0].size != ys[0].size:
        return False
    shape = tuple(x_value.shape)
    sizes = [min(s, 6) for s in shape] if math.prod(shape) > 1000 else list(shape)
    if math.prod(sizes) != xs[0].size:
        return False
    move = lambda a: np.moveaxis(a.reshape(sizes), 1, 0).reshape(sizes[1], -1)  # noqa: E731
    x, y, ex, ey = move(xs[0]), move(ys[0]), move(xs[1]) / 2, move(ys[1]) / 2
    if x.shape[1] < 4:
        return False
    for c in range(x.shape[0]):
        spread = x[c] - x[c].mean()
        if not float(np.abs(spread).max()) > 8 * float(ex[c].max()):
            return False  # too few distinct printed inputs to fit a line through
        s = float((spread * (y[c] - y[c].mean())).sum() / (spread * spread).sum())
        t = float(y[c].mean() - s * x[c].mean())
        own = 6 * u * (lipschitz * np.abs(x[c]) + lipschitz * mean + offset) + 2 * u * np.abs(y[c])
        allowed = ey[c] + abs(s) * ex[c] + own
        # the fitted line moves by at most the largest allowance at each point: twice it, for the fit's own error
        if abs(s) > lipschitz * (1 + 1e-3) or not bool((np.abs(y[c] - (s * x[c] + t)) <= 2 * allowed.max()).all()):
            return False
    return True
