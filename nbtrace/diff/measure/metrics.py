"""How far apart two recorded tensors are, and whether that counts as agreeing.

Three bases, strongest first, chosen per tensor pair from what both traces hold:

- ``"tensors"``: both sides have the full tensor (safetensors). ``max_abs`` is
  ``max|a - b|``, ``max_rel`` is ``max|a - b| / max|a|`` (relative to the largest
  magnitude in the reference, so elements near zero do not blow it up) and
  ``cosine`` the cosine similarity of the flattened tensors. They agree when
  ``max_abs <= atol + rtol * max|a|`` and NaN/inf sit at the same places.
- ``"printed"``: both sides have torch's printout (``use_repr=True``): every
  element up to 1000 elements, the edges of bigger tensors. The printed numbers
  are compared element by element, and the stats too when present.
- ``"stats"``: only the mean/std/min/max strings.

Printed values and stat strings are rounded (5 significant digits by default),
so a printed number ``p`` stands for anything within half a unit of its last
digit (``ulp``). Two printed numbers agree when
``|p_a - p_b| <= max(ulp_a, ulp_b) + rtol * scale + atol``, with ``scale`` the
largest magnitude of a's tensor (``max|min|, |max|`` for stats): one unit of
rounding is never a difference, two are.

Default ``(rtol, atol)`` by dtype (the looser of the two sides' dtypes applies;
integers and bools must be equal): see ``TOLERANCE``.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...core.dtypes import is_float, short_dtype
from ...core.tensor import STAT_NAMES, TensorValue
from .layouts import in_a_layout, orders, printed_in_a_layout, same_values

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

#: called with a TensorDiff and the two full tensors it was computed from
Observer = Callable[["TensorDiff", Any, Any], None]
#: fills a TensorDiff's numbers from the two recorded tensors (both with files)
FullMeasure = Callable[["TensorDiff", TensorValue, TensorValue], None]

#: dtype -> default (rtol, atol), relative to the largest magnitude of a's tensor.
TOLERANCE: dict[str, tuple[float, float]] = {
    "float64": (1e-10, 1e-12),
    "float32": (1e-5, 1e-8),
    "float16": (2e-3, 1e-6),
    "bfloat16": (1.6e-2, 1e-6),
}
_OTHER_FLOAT = (5e-2, 1e-6)  # float8 and anything newer
_LOOSENESS = {"float64": 1, "float32": 2, "float16": 3, "bfloat16": 4}

_NUMBER = re.compile(
    r"(?<![\w.])([-+]?)(?:(\d+)(?:\.(\d*))?(?:[eE]([-+]?\d+))?|(inf|nan))(?![\w.])|\b(True|False)\b"
)
_TAIL = re.compile(r",\s*(?:dtype|device|grad_fn|requires_grad|size|layout|names)=")


def squeezed(shape: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """``shape`` without its leading size-1 dimensions (``[1, 16, 128]`` -> ``(16, 128)``)."""
    dims = list(shape)
    while len(dims) > 1 and dims[0] == 1:
        dims.pop(0)
    return tuple(dims)


def same_shape(a: tuple[int, ...] | list[int], b: tuple[int, ...] | list[int]) -> bool:
    """Equal shapes, or shapes that differ only by leading size-1 dimensions: the same values once broadcast
    (GPT-2's position embeddings ``[1, T, D]`` against a port's ``[T, D]``)."""
    return tuple(a) == tuple(b) or squeezed(a) == squeezed(b)


@functools.lru_cache(maxsize=256)
def default_tolerance(dtype_a: str, dtype_b: str) -> tuple[float, float]:
    """The ``(rtol, atol)`` used when the caller gives none (the looser dtype of the two wins)."""
    a, b = short_dtype(dtype_a), short_dtype(dtype_b)
    if not (is_float(a) and is_float(b)):
        return 0.0, 0.0
    loosest = max((a, b), key=lambda name: _LOOSENESS.get(name, 5))
    return TOLERANCE.get(loosest, _OTHER_FLOAT)


@dataclass
class TensorDiff:
    """The comparison of one tensor of ``a`` with its counterpart in ``b``.

    ``score`` is the largest relative difference found (``max_rel`` and the stat
    differences, each relative to a's largest magnitude); ``ok`` is None when
    nothing could be compared.
    """

    io: str
    arg: str
    b_arg: str
    shape: tuple[int, ...]
    b_shape: tuple[int, ...]
    dtype: str
    b_dtype: str
    basis: str | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    cosine: float | None = None
    stat_diffs: dict[str, float] = field(default_factory=dict)
    rtol: float | None = None
    atol: float | None = None
    ok: bool | None = None
    problem: str | None = None
    excess: float | None = None  # largest difference beyond print rounding, relative to a's scale

    @property
    def notable(self) -> bool:
        """Within tolerance, but beyond rounding by more than a tenth of it: a hint of an earlier start."""
        return bool(self.ok) and self.excess is not None and self.rtol is not None and self.excess > self.rtol / 10

    @property
    def score(self) -> float | None:
        found = [v for v in (self.max_rel, *self.stat_diffs.values()) if v is not None]
        if self.ok is False and self.problem is not None and not found:
            return math.inf
        if not found:
            return None
        return max(found, key=lambda v: (math.isnan(v), v))


def diff_tensors(
    io: str, arg: str, b_arg: str, a: TensorValue, b: TensorValue, rtol: float | None, atol: float | None,
    full: FullMeasure | None = None,
) -> TensorDiff:
    """Compare ``a`` (the reference) with ``b`` on the strongest basis both sides allow. ``full``, when given,
    measures a pair of full tensors (``full_pairs.FullPairs``: files read once, numpy, the verdict's numbers in
    the same pass); without it they are loaded with torch. Full tensors that hold the same axes in another order
    (channels first against channels last), or the same values with other sizes one (``[N, C, 1, 1]`` against
    ``[N, C]``), are compared with b's read in a's layout (``layouts.py``)."""
    result = TensorDiff(io, arg, b_arg, a.shape, b.shape, short_dtype(a.dtype), short_dtype(b.dtype))
    if not same_shape(a.shape, b.shape) and not ((a.ref is not None and b.ref is not None or a.lines and b.lines)
                                                 and same_values(a.shape, b.shape)):
        result.basis = "shape"
        result.ok = False
        result.problem = f"shape {list(a.shape)} vs {list(b.shape)}"
        return result
    r, t = default_tolerance(a.dtype, b.dtype)
    result.rtol = r if rtol is None else rtol
    result.atol = t if atol is None else atol
    if is_float(a.dtype) and is_float(b.dtype) and is_mask(a) and is_mask(b):
        compare_masks(result, a, b)
        return result
    if a.ref is not None and b.ref is not None:
        if full is not None:
            full(result, a, b)
        else:
            measure_with_torch(result, a, b)
        return result
    exact = not (is_float(a.dtype) and is_float(b.dtype))
    a_values, b_values = printed_arrays(a, exact), printed_arrays(b, exact)
    if a_values is not None and b_values is not None and len(orders(tuple(a.shape), tuple(b.shape))) > 1:
        b_values = printed_in_a_layout(tuple(a.shape), tuple(b.shape), a_values, b_values)  # another layout
    have_printed = a_values is not None and b_values is not None and a_values[0].size == b_values[0].size
    have_stats = bool(a.stats) and bool(b.stats)
    if not have_printed and not have_stats:
        result.rtol = result.atol = None
        return result
    result.basis = "printed" if have_printed else "stats"
    ok = True
    if have_printed:
        ok = _printed(result, a_values, b_values) and ok
    if have_stats:
        ok = _stats(result, a, b) and ok
    result.ok = ok
    return result


#: a value this large (or -inf) in a float tensor is a mask's fill, whatever the dtype
SENTINEL = 1e30


def is_mask(tensor: TensorValue) -> bool:
    """A float tensor whose values are 0 and a mask's fill (``finfo.min``, ``-inf``): an additive attention mask,
    told from its stats (max 0, min at most -1e30)."""
    low, high = tensor.min, tensor.max
    return low is not None and high is not None and high == 0 and (low <= -SENTINEL or low == -math.inf)


def compare_masks(result: TensorDiff, a: TensorValue, b: TensorValue) -> None:
    """Two additive masks agree when they mask the same positions: the fill (``finfo.min`` of one dtype or
    another, ``-inf``) is a representation, not a value. Compared on full tensors, else on the printed elements,
    else on the share of masked positions the stats imply (``mean / min``)."""
    import numpy as np

    result.basis = "mask"
    result.rtol = result.atol = None  # no tolerance: the same positions masked, or not
    if a.ref is not None and b.ref is not None:
        x, y = a.load().detach().reshape(-1), b.load().detach().reshape(-1)
        masked_a, masked_b = (x <= -SENTINEL).numpy(), (y <= -SENTINEL).numpy()
    else:
        xs, ys = printed_arrays(a), printed_arrays(b)
        if xs is not None and ys is not None and xs[0].size == ys[0].size:
            masked_a, masked_b = xs[0] <= -SENTINEL, ys[0] <= -SENTINEL
        else:
            share_a = a.mean / a.min if a.mean is not None and a.min else 0.0
            share_b = b.mean / b.min if b.mean is not None and b.min else 0.0
            masked_a, masked_b = np.array([round(share_a, 4)]), np.array([round(share_b, 4)])
    differ = int((masked_a != masked_b).sum())
    result.max_abs = result.max_rel = 0.0 if differ == 0 else 1.0
    result.cosine = 1.0 if differ == 0 else None
    result.ok = differ == 0
    result.excess = 0.0


def measure_with_torch(result: TensorDiff, a: TensorValue, b: TensorValue,
                       observe: Observer | None = None) -> None:
    """Fill ``result`` from both full tensors, loaded with torch (``full_pairs`` reads files with numpy)."""
    result.basis = "tensors"
    x = a.load()
    y = b.load()
    if len(orders(tuple(x.shape), tuple(y.shape))) > 1:  # the same axes, maybe in another order: read in a's
        y = in_a_layout(x, y)
    _full_numbers(result, x, y)
    if observe is not None:
        observe(result, x, y)


def _full_numbers(result: TensorDiff, x: torch.Tensor, y: torch.Tensor) -> None:
    import torch

    if x.is_complex() or y.is_complex():
        x, y = torch.view_as_real(x.to(torch.complex128)), torch.view_as_real(y.to(torch.complex128))
    x = x.detach().to(torch.float64).reshape(-1)
    y = y.detach().to(torch.float64).reshape(-1)
    both = torch.isfinite(x) & torch.isfinite(y)
    same_special = (x == y) | (torch.isnan(x) & torch.isnan(y))
    if bool((~both & ~same_special).any()):
        result.max_abs = result.max_rel = math.inf
        result.ok = False
        result.problem = "NaN/inf at different places"
        return
    xf, yf = x[both], y[both]
    if xf.numel() == 0:
        result.max_abs, result.max_rel, result.ok = 0.0, 0.0, True
        return
    delta = (xf - yf).abs().max().item()
    scale = xf.abs().max().item()
    result.max_abs = delta
    result.max_rel = relative_to(delta, scale)
    norms = xf.norm().item() * yf.norm().item()
    if norms > 0:
        result.cosine = max(-1.0, min(1.0, float((xf @ yf).item() / norms)))
    elif delta == 0:
        result.cosine = 1.0
    assert result.rtol is not None and result.atol is not None
    result.excess = result.max_rel
    result.ok = delta <= result.atol + result.rtol * scale


def _printed(result: TensorDiff, xs: tuple[np.ndarray, np.ndarray], ys: tuple[np.ndarray, np.ndarray]) -> bool:
    """Compare two printouts number by number: a difference beyond both numbers' last-digit units and the
    tolerance is one; NaN/inf must sit at the same places."""
    import numpy as np

    assert result.rtol is not None and result.atol is not None
    (x, ux), (y, uy) = xs, ys
    both = np.isfinite(x) & np.isfinite(y)
    if not both.all():
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        if bool((~both & ~same).any()):
            result.max_abs = result.max_rel = math.inf
            result.problem = "NaN/inf at different places"
            return False
        x, y, ux, uy = x[both], y[both], ux[both], uy[both]
    if x.size == 0:
        result.max_abs, result.max_rel = 0.0, 0.0
        result.excess = max(result.excess or 0.0, 0.0)
        result.cosine = 1.0
        return True
    d = np.abs(x - y)
    scale = float(np.abs(x).max())
    beyond = d - np.maximum(ux, uy)
    delta, excess = float(d.max()), max(float(beyond.max()), 0.0)
    ok = not bool((beyond > result.rtol * scale + result.atol).any())
    dot, nx, ny = float(np.dot(x, y)), float(np.dot(x, x)), float(np.dot(y, y))
    result.max_abs = delta
    result.max_rel = relative_to(delta, scale)
    result.excess = max(result.excess or 0.0, relative_to(excess, scale))
    if nx > 0 and ny > 0:
        result.cosine = max(-1.0, min(1.0, dot / math.sqrt(nx * ny)))
    elif delta == 0:
        result.cosine = 1.0
    return ok


def _stats(result: TensorDiff, a: TensorValue, b: TensorValue) -> bool:
    assert result.rtol is not None and result.atol is not None
    edges = [abs(v) for v in (a.min, a.max) if v is not None and math.isfinite(v)]
    spread = a.std if a.std is not None and math.isfinite(a.std) else 0.0
    scale = max(edges) if edges else spread
    ok = True
    for name in STAT_NAMES:
        x, y = getattr(a, name), getattr(b, name)
        if x is None or y is None:
            continue
        if name == "std" and a.numel <= 1:  # std of one element is nan on both sides: nothing to compare
            continue
        if not (math.isfinite(x) and math.isfinite(y)):
            same = x == y or (math.isnan(x) and math.isnan(y))
            result.stat_diffs[name] = 0.0 if same else math.inf
            ok = ok and same
            continue
        delta = abs(x - y)
        if delta == 0:
            result.stat_diffs[name] = 0.0
            continue
        unit = max(_stat_ulp(a.stats.get(name)), _stat_ulp(b.stats.get(name)))
        size = max(scale, abs(x))
        result.stat_diffs[name] = relative_to(delta, size)
        result.excess = max(result.excess or 0.0, relative_to(max(delta - unit, 0.0), size))
        ok = ok and delta <= unit + result.rtol * size + result.atol
    return ok


def relative_to(delta: float, scale: float) -> float:
    """``delta / scale``: 0 for no difference, inf for a difference against zero."""
    if delta == 0:
        return 0.0
    return delta / scale if scale > 0 else math.inf


def _ulp(match: re.Match[str]) -> float:
    """One unit in the last printed digit of a number token."""
    return _unit(match.group(4) or "", len(match.group(3) or ""))


@functools.lru_cache(maxsize=4096)
def _stat_ulp(text: str | None) -> float:
    if not text:
        return 0.0
    body = text.removeprefix("tensor(")
    match = _NUMBER.search(body)
    return _ulp(match) if match is not None and match.group(2) is not None else 0.0


def printed_numbers(tensor: TensorValue, exact: bool = False) -> list[tuple[float, float]] | None:
    """The numbers torch printed for a tensor (``...`` skipped) as ``(value, ulp)``; None without lines.

    ``ulp`` is one unit of the last printed digit (0 with ``exact``: integers, bools).
    """
    found = printed_arrays(tensor, exact)
    return None if found is None else list(zip(found[0].tolist(), found[1].tolist()))


def printed_arrays(tensor: TensorValue, exact: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """``printed_numbers`` as two float64 arrays (values, ulps), read once per printout: a tensor handed on
    again (a layer's output, the next layer's input) is printed alike."""
    lines = tensor.lines
    if not lines:
        return None
    return _parse_printout(" ".join(lines), exact)


@functools.lru_cache(maxsize=2048)
def _parse_printout(text: str, exact: bool) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    text = text.removeprefix("tensor(")
    tail = _TAIL.search(text)
    if tail is not None:
        text = text[: tail.start()]
    values: list[float] = []
    ulps: list[float] = []
    for sign, whole, decimals, exponent, special, word in _NUMBER.findall(text):
        if word:
            values.append(1.0 if word == "True" else 0.0)
            ulps.append(0.0)
        elif special:
            values.append(float(sign + special))
            ulps.append(0.0)
        else:
            values.append(float(f"{sign}{whole}.{decimals}e{exponent or 0}"))
            ulps.append(0.0 if exact else _unit(exponent, len(decimals)))
    found = np.array(values, dtype=np.float64), np.array(ulps, dtype=np.float64)
    found[0].flags.writeable = found[1].flags.writeable = False  # shared by every reader of this printout
    return found


@functools.lru_cache(maxsize=512)
def _unit(exponent: str, decimals: int) -> float:
    """One unit of the last printed digit of a number with this exponent and this many decimals."""
    return 10.0 ** ((int(exponent) if exponent else 0) - decimals)
