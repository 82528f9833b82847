"""Two printed folders without a twin, judged by the run's own sketches: the ``bound`` test from the ``sketch`` section.

A folder of printed values holds a call's corners only; its sidecar's ``sketch`` section (``core/sketch.py``) holds,
for every float input and output, 16 random-sign sums of the run's own tensor and its exact norm (padding rows left
out). Between two folders, at a call that both sketched:

- the inputs are the same bit for bit where every sum, the kept count and the norm are equal;
- ``‖Δ‖`` is bounded from the sums' difference ``S = Σ_k (s_b,k − s_a,k)²`` (``E[S] = ‖Δ‖²``): **at least**
  ``max(|‖y_b‖ − ‖y_a‖|, √(S/T))`` (the first is exact; the second holds with probability ``1 − P_FALSE`` for any
  difference, as a sum of random signs is sub-Gaussian: ``P(S ≥ t‖Δ‖²) ≤ √t·e^{−(t−1)/2}``) and **at most**
  ``√(16·S/q)`` (``q`` the ``P_FALSE`` quantile of χ²₁₆: a difference spread over many elements, as rounding's is,
  makes each of the 16 sums Gaussian with a sixteenth of ``‖Δ‖²``);
- the operation a leaf computes is read as ``operation.py`` reads it (never from a name): an elementwise function
  where the reference's printed corners are one of ``bounds.py``'s functions of its input within their printed
  digits; an RMSNorm where the printed output over the printed input is a positive gain per column times a positive
  scale per row (rank one), its gains the sidecar's, and only where its inputs are the same bit for bit (the norm's
  Lipschitz bound needs each row's spread, which a sketch does not hold); each only where both sides hold the same
  weights bit for bit; a BatchNorm at eval where the printed corners are one line per channel (``sketch_axes.py``).
  Leaves holding a matrix (linear maps) are not sketched: their weights are the fingerprints'.

A leaf whose output differs by at least more than the most any correct implementation of its operation could make
from inputs that differ by at most that much (``bounds.py``'s error analysis, on 2-norms by the triangle inequality:
the printing's precision is no part of it, the sketches are the run's own values) is named. Nothing is tuned:
``P_FALSE`` is the stated probability of a false alarm per call.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ...core.dtypes import is_float
from ...core.sketch import sketch_of
from ..measure import bounds
from ..measure.metrics import printed_arrays
from ..measure.noise import unit_roundoff
from . import sketch_axes
from .divergence import FirstDivergence
from .evidence import Evidence
from .operation import _held, _same_tensors
from .weighted import weighted_divergence

if TYPE_CHECKING:  # pragma: no cover
    from ...core.node import Node
    from ...core.twin import Twin, TwinPrint
    from ..comparison import Comparison

P_FALSE = 1e-6  # the probability that a correct call is named, per call
SUMS = 16


def _chi2_cdf(x: float, k: int) -> float:
    """χ²'s distribution function for an even ``k`` (closed form)."""
    term, total = 1.0, 1.0
    for i in range(1, k // 2):
        term *= (x / 2) / i
        total += term
    return 1.0 - math.exp(-x / 2) * total


def _solve(f, low: float, high: float) -> float:
    """The root of an increasing ``f`` between ``low`` and ``high`` (bisection to 1e-12)."""
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) < 0 else (low, mid)
    return low


#: ‖Δ‖² ≤ SPREAD·S: 16 / (the P_FALSE quantile of χ²₁₆), taken low (the bisection's lower end)
SPREAD = SUMS / _solve(lambda x: _chi2_cdf(x, SUMS) - P_FALSE, 0.0, 100.0)
#: ‖Δ‖² ≥ S / PEAK: the t where √t·e^{−(t−1)/2} = P_FALSE, taken high
PEAK = _solve(lambda t: P_FALSE - math.sqrt(t) * math.exp(-(t - 1) / 2), 1.0, 1000.0) + 1e-9


class _Pair:
    """One tensor's sketches on both sides: the bounds on ``‖x_b − x_a‖`` and both norms."""

    def __init__(self, a: TwinPrint, b: TwinPrint) -> None:
        self.norm_a, self.norm_b = a.rms * math.sqrt(a.kept), b.rms * math.sqrt(b.kept)
        s = sum((x - y) ** 2 for x, y in zip(a.sums, b.sums))
        self.same = s == 0 and a.kept == b.kept and a.rms == b.rms
        self.at_most = math.sqrt(SPREAD * s)
        self.at_least = max(abs(self.norm_b - self.norm_a), math.sqrt(s / PEAK))


def sketch_divergence(comparison: Comparison) -> FirstDivergence | None:
    """The first leaf of a (call order) whose output differs beyond its bound, from both folders' sketches."""
    mine, theirs = sketch_of(comparison.a), sketch_of(comparison.b)
    if mine is None or theirs is None or mine.padding != theirs.padding:
        return None
    for node in comparison.a.nodes():
        if node.children:
            continue
        match = comparison.match_of(node)
        if match is None:
            continue
        found = _bound(comparison, node, match.b, mine, theirs)
        if found is not None and found.score >= 1:
            return _named(comparison, node, found)
    return None


def plain_divergence(comparison: Comparison, found: FirstDivergence | None) -> FirstDivergence | None:
    """What two printed folders name where the per-element tolerance found ``found`` (or nothing): ``found`` where
    it is categorical (another shape, NaN/inf, integers) or a weight the fingerprints show changed (``weighted.py``),
    or a call beyond its sketched bound, whichever comes first in a's call order (None: nothing named)."""
    named = None
    if found is not None:
        categorical = any(d.ok is False and (d.problem is not None or d.basis == "shape" or d.rtol == 0)
                          for d in found.diffs if d.io == found.io)
        named = weighted_divergence(comparison, found, categorical)
    sketched = sketch_divergence(comparison)
    if sketched is None or named is None:
        return named or sketched
    order = {id(n): i for i, n in enumerate(comparison.a.nodes())}
    return sketched if order.get(id(sketched.node), 0) < order.get(id(named.node), 0) else named


def _places(prints: dict[str, TwinPrint]) -> tuple[list[str], list[str]]:
    ins = [p for p in prints if p.startswith(("args.", "kwargs."))]
    return ins, [p for p in prints if p == "out" or p.startswith("out.")]


def _bound(comparison: Comparison, node: Node, other: Node, mine: Twin, theirs: Twin) -> bounds.Bound | None:
    a, b = mine.of(node), theirs.of(other)
    (ins_a, outs_a), (ins_b, outs_b) = _places(a), _places(b)
    if len(ins_a) != 1 or len(ins_b) != 1 or outs_a != ["out"] or outs_b != ["out"]:
        return None
    xa, xb, ya, yb = a[ins_a[0]], b[ins_b[0]], a["out"], b["out"]
    if xa.shape != xb.shape or ya.shape != yb.shape or xa.kept != xb.kept or ya.kept != yb.kept \
            or any(t.left_out for t in (xa, xb, ya, yb)):
        return None
    x_value = next((t for io, arg, t in node.tensors() if io == "input" and arg == ins_a[0]), None)
    y_value = next((t for io, arg, t in node.tensors() if io == "output" and arg == "out"), None)
    if x_value is None or y_value is None or not is_float(y_value.dtype) or not is_float(x_value.dtype):
        return None
    u = unit_roundoff(x_value.dtype, y_value.dtype)
    held_a = _held(comparison.a, node.module_path)
    held_b = _held(comparison.b, other.module_path)
    x, y = _Pair(xa, xb), _Pair(ya, yb)
    if not held_a and not held_b:  # no sidecar, or no float tensors held: an elementwise function, if it is one
        return _elementwise(x_value, y_value, x, y, u) if xa.shape == ya.shape else None
    if held_a is None or held_b is None or not _same_tensors(held_a, held_b):
        return None
    if set(held_a) == set(sketch_axes.NAMES):
        return sketch_axes.batch_norm(held_a, x_value, y_value, x, y, u)
    if set(held_a) - {"weight", "bias"}:
        return None
    weight = held_a["weight"]
    shape = weight.get("shape")
    if not isinstance(shape, list):
        return None
    if len(shape) == 1 and "bias" not in held_a and xa.shape == ya.shape and shape[0] == xa.shape[-1] and x.same:
        gain = weight.get("absmax")
        if isinstance(gain, (int, float)) and math.isfinite(gain) and _rank_one(x_value, y_value, u):
            return _rms_norm(y, xa, u, float(gain) * (1 + 1e-6))
    return None


def _elementwise(x_value, y_value, x: _Pair, y: _Pair, u: float) -> bounds.Bound | None:
    """``‖Δy‖ ≤ L‖Δx‖ + 3u(‖y_a‖+‖y_b‖) + 2uL(‖x_a‖+‖x_b‖)`` with the largest ``L`` of every known function the
    reference's printed corners fit."""
    import numpy as np

    xs, ys = printed_arrays(x_value), printed_arrays(y_value)
    if xs is None or ys is None or xs[0].size != ys[0].size or xs[0].size < 16 or not np.abs(xs[0]).max() > 0:
        return None
    import torch

    xv, yv = torch.tensor(xs[0]), torch.tensor(ys[0])
    fits = []
    for name, f in bounds._functions().items():
        slope = bounds.slopes()[name]
        allowed = ys[1] / 2 + slope * xs[1] / 2 + 3 * u * np.abs(ys[0]) + 2 * u * slope * np.abs(xs[0])
        if bool(((yv - f(xv)).abs().numpy() <= allowed * (1 + 1e-9)).all()):
            fits.append((slope, name))
    if not fits:
        return None
    slope, name = max(fits)
    allowed = slope * x.at_most + 3 * u * (y.norm_a + y.norm_b) + 2 * u * slope * (x.norm_a + x.norm_b)
    return bounds.Bound(y.at_least, allowed, name if len(fits) == 1 else " or ".join(n for _, n in fits),
                        f"L‖Δx‖ + 3u(‖y_a‖+‖y_b‖) + 2uL(‖x_a‖+‖x_b‖), L = {slope:g}, ‖Δ‖ from the sketches")


def _rms_norm(y: _Pair, x: TwinPrint, u: float, gain: float) -> bounds.Bound:
    """From the same inputs, ``bounds.norm``'s rounding summed over rows: ``(5u + γ_D/2)(‖y_a‖ + ‖y_b‖)`` and the
    centring's ``(u + γ_D)·g·(‖x_i‖ + √D·rms(x_i))/s_i`` per row and side, at most ``2(u + γ_D)·g·√(D·rows)`` where
    the mean is negligible (the printed rank-one structure says it is)."""
    d = x.shape[-1]
    rows = x.kept / d
    relative = 5 * u + d * bounds.U32 / 2
    centring = 2 * (u + d * bounds.U32) * gain * math.sqrt(d * rows)
    allowed = relative * (y.norm_a + y.norm_b) + 2 * centring
    return bounds.Bound(y.at_least, allowed, f"RMSNorm over {d}",
                        "(5u + γ_D/2)(‖y_a‖+‖y_b‖) + centring, inputs the same bit for bit")


def _rank_one(x_value, y_value, u: float) -> bool:
    """Whether the reference's printed ``y/x`` is a positive scale per row times a gain per column (an RMSNorm's
    ``g_j/s_i``), within the printed digits: its log is a row term plus a column term."""
    import numpy as np

    xs, ys = printed_arrays(x_value), printed_arrays(y_value)
    grid = _grid(tuple(x_value.shape), xs[0].size if xs is not None else 0)
    if xs is None or ys is None or grid is None or xs[0].size != ys[0].size:
        return False
    rows, cols = grid
    x, y = xs[0].reshape(rows, cols), ys[0].reshape(rows, cols)
    ex, ey = xs[1].reshape(rows, cols) / 2, ys[1].reshape(rows, cols) / 2
    usable = (np.abs(x) > 4 * ex) & (np.abs(y) > 4 * ey)
    if rows < 2 or cols < 2 or not usable.all():
        return False
    signs = np.sign(y / x)
    if not (signs == signs[:1]).all():  # g_j's sign, the same in every row
        return False
    log = np.log(np.abs(y / x))
    own = 5 * u + x_value.shape[-1] * bounds.U32 / 2  # the reference's rounding of each element
    slack = ex / np.abs(x) * 1.01 + ey / np.abs(y) * 1.01 + 1.01 * own  # |log(1 + e)| <= 1.01|e| for |e| <= 1/4
    residual = log - log[:, :1] - log[:1, :] + log[0, 0]
    allowed = slack + slack[:, :1] + slack[:1, :] + slack[0, 0]
    return bool((np.abs(residual) <= allowed).all())


def _grid(shape: tuple[int, ...], count: int) -> tuple[int, int] | None:
    """The printed corners as (rows, last dimension's printed columns): torch prints 3 + 3 of each longer
    dimension where a tensor holds more than 1000 elements."""
    summarized = math.prod(shape) > 1000
    sizes = [min(s, 6) if summarized else s for s in shape]
    if not sizes or math.prod(sizes) != count:
        return None
    return count // sizes[-1], sizes[-1]


def _named(comparison: Comparison, node: Node, found: bounds.Bound) -> FirstDivergence:
    match = comparison.match_of(node)
    diffs = match.diffs if match is not None else []
    worst = next((d for d in diffs if d.io == "output"), None)
    sentence = (f"its outputs (out) differ by at least {found.difference:.3g} (2-norm, from both runs' sketches) where "
                f"any correct {found.what} allows {found.allowed:.3g} from the inputs it was handed ({found.formula}; "
                f"at most {P_FALSE:g} of correct calls are named)")
    result = FirstDivergence.blaming(
        comparison, node, observed_path=node.module_path, io="output", arg="out",
        b_arg=worst.b_arg if worst else "out", basis=worst.basis if worst else None,
        max_abs=worst.max_abs if worst else None, max_rel=worst.max_rel if worst else None,
        cosine=worst.cosine if worst else None, stat_diffs=dict(worst.stat_diffs) if worst else {}, diffs=diffs,
        reason=sentence)
    result.evidence = [Evidence("bound", found.difference, found.allowed, found.score, sentence)]
    result.confidence = "certain" if found.score >= 3 else "likely"
    return result
