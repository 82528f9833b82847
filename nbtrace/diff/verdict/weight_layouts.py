"""One weight held in another layout: the numbers of a fingerprint that do not depend on the order of its elements.

A Flax convolution's kernel ``[h, w, in, out]`` is a PyTorch ``[out, in, h, w]`` weight with its axes in another order;
a Flax attention kernel ``[in, heads, head_dim]`` a ``[heads * head_dim, in]`` one. The bit sum, mean, std, minimum,
maximum and norm do not depend on the order, so they say whether the two hold the same values (``weights.py``'s
findings; which arrangement is right is judged by the calls' outputs).
"""

from __future__ import annotations

import math
from typing import Any

#: unit roundoff of the dtypes a weight can be rounded through
UNIT_ROUNDOFF = {"float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11, "float8_e4m3fn": 2.0**-4}


def permuted(a: dict, b: dict) -> tuple[str, str, float | None, bool] | None:
    """The same values in another arrangement (a Flax kernel ``[in, heads, head_dim]`` against a PyTorch weight
    ``[heads * head_dim, in]``, a convolution's ``[h, w, in, out]`` against ``[out, in, h, w]``): equal element
    counts and the fingerprint's permutation-invariant numbers equal (the bit sum, mean, std, min, max, norm), or
    within the narrower dtype's rounding. Which arrangement is right is judged by the calls' outputs. None
    otherwise."""
    shape_a, shape_b = a.get("shape"), b.get("shape")
    if not isinstance(shape_a, list) or not isinstance(shape_b, list) or math.prod(shape_a) != math.prod(shape_b):
        return None
    stats = ("mean", "std", "min", "max", "norm")
    words = f"shape {shape_b} where a has {shape_a}: the same values in another arrangement (another " \
        "framework's layout; its values are judged by the calls' outputs)"
    xs, ys = floats([a.get(k) for k in stats]), floats([b.get(k) for k in stats])
    if len(xs) != len(stats) or len(ys) != len(stats):
        return None
    scale = max(abs(v) for v in xs[1:4]) or 1.0  # std, min, max: the size of the values
    if a.get("dtype") == b.get("dtype"):
        # the bit sum is blind to order, exact; the statistics agree to the fingerprint's 7 digits (their sums
        # ran in another order)
        if a.get("checksum") is not None and a.get("checksum") == b.get("checksum") and \
                all(abs(x - y) <= 1e-5 * max(abs(x), abs(y), scale) for x, y in zip(xs, ys)):
            return "layout", words, None, False
        return None
    narrower = max((a.get("dtype"), b.get("dtype")), key=lambda d: UNIT_ROUNDOFF.get(d, 0.0))
    unit = UNIT_ROUNDOFF.get(narrower)
    if unit is not None and all(abs(x - y) <= 4 * unit * max(abs(x), abs(y), scale) for x, y in zip(xs, ys)):
        return "dtype", f"{words}, in dtype {b.get('dtype')} where a has {a.get('dtype')}", None, False
    return None


def same_axes_of(shape_a: Any, shape_b: Any) -> bool:
    """Two shapes of the same sizes in another order (a Flax convolution's ``[h, w, in, out]`` and ``[out, in, h,
    w]``): the one tensor left on each side of a pair of modules is then one weight in two layouts."""
    return isinstance(shape_a, list) and isinstance(shape_b, list) and len(shape_a) > 2 and \
        sorted(shape_a) == sorted(shape_b)


def rearranged_differs(a: dict, b: dict) -> tuple[str, str, float | None, bool] | None:
    """One weight in two layouts whose order-blind numbers differ (``permuted`` found them unequal): a serious
    finding, its relative size bounded below by the norms' difference. None where the norms are not held."""
    norms = floats([a.get("norm"), b.get("norm")])
    if len(norms) != 2 or not norms[0]:
        return None
    rel = abs(norms[1] - norms[0]) / norms[0]
    return ("perturbed", f"shape {b.get('shape')} where a has {a.get('shape')} (another layout), and its values "
            f"differ: norm {short_number(norms[1])} where a has {short_number(norms[0])} (relative {short_number(rel)})", rel, True)


def floats(values: Any) -> list[float]:
    if not isinstance(values, list):
        return []
    out = []
    for value in values:
        try:
            out.append(float(value))
        except (TypeError, ValueError):
            return []
    return out if all(math.isfinite(v) for v in out) else []


def short_number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}"
