"""Operations of image libraries that act along an axis other than the last: read from what the files show.

``operation.py`` reads operations over the last axis (a linear map, a norm over the features). A channels-first
library (timm's ConvNeXt and ResNet) computes the same things over the channel axis of ``[N, C, H, W]``, and
convolutions mix a window of positions. From the module's held tensors (the sidecar's fingerprints, the same bits
on both sides) and a's own values, never from a name:

- a leaf holding one vector ``[C]`` (and maybe a bias ``[C]``) whose reference output is its input normalised over
  an axis of size ``C`` times the sampled gains (``operation._which_norm`` on that axis moved last): a LayerNorm or
  RMSNorm over channels (timm's ``LayerNorm2d``), with ``bounds.norm``'s bound;
- a leaf holding one vector ``[C]`` and nothing else whose reference output is its input times it along an axis of
  size ``C`` at the sampled positions (a layer scale): ``|Δy| ≤ max|v|·|Δx| + 2u(|y_a| + |y_b|)``;
- a leaf holding a gain, a bias, a running mean and a running variance ``[C]`` whose reference output is, at the
  sampled channels, its input minus the mean times one scale per channel plus the bias (no larger than the gain over
  the variance's root: eps ≥ 0): a BatchNorm at eval, ``|Δy| ≤ L|Δx| + r_a + r_b`` with ``L = max|g|/√min(v)`` and
  each side's rounding ``r = 6u(L|x| + L·max|μ| + max|b|) + 2u|y|`` (the scale's eps, root and quotient, the
  centring or the fused shift, the product and the sum; ``2u`` for the result and a cast);
- a leaf holding a weight ``[O, I/g, k_1, ...]`` (and maybe a bias ``[O]``) whose input is ``[N, I, s_1, ...]`` and
  output ``[N, O, ...]`` of as many axes: a convolution (1x1, depthwise, strided: ``bounds.convolution``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..measure import bounds

if TYPE_CHECKING:  # pragma: no cover
    import torch

_SAMPLE_DIGITS = 1e-6  # a fingerprint's numbers hold 7 significant digits


def along_axis(held: dict[str, dict], tensors: tuple, u: float, float32: bool) -> bounds.Bound | None:
    """The bound of a leaf holding ``held`` whose operation acts along a non-last axis (None: not one of these)."""
    if len(tensors) != 4:
        return None
    x_a, x_b, y_a, y_b = tensors
    if not all(bool(t.isfinite().all()) for t in tensors):
        return None
    weight = held.get("weight")
    if set(held) == {"weight", "bias", "running_mean", "running_var"}:
        return _batch_norm(held, x_a, x_b, y_a, y_b, u)
    if weight is None and len(held) == 1:
        return _scale(next(iter(held.values())), x_a, x_b, y_a, y_b, u)
    if weight is None or not isinstance(weight.get("shape"), list) or set(held) - {"weight", "bias"}:
        return None
    shape = weight["shape"]
    if len(shape) == 1 and x_a.shape == y_a.shape and x_a.ndim >= 3:
        if "bias" not in held:
            found = _scale(weight, x_a, x_b, y_a, y_b, u)
            if found is not None:
                return found
        return _norm(weight, held.get("bias"), x_a, x_b, y_a, y_b, u)
    if len(shape) >= 3 and x_a.ndim == y_a.ndim == len(shape):
        return _convolution(weight, held.get("bias"), x_a, x_b, y_a, y_b, u, float32)
    return None


def _last(t: torch.Tensor, axis: int) -> torch.Tensor:
    return t.movedim(axis, -1).reshape(-1, t.shape[axis])


def _axes(x: torch.Tensor, size: int) -> list[int]:
    """The axes other than the last of ``x`` of ``size`` (the batch's first axis too: a norm over it is one)."""
    return [k for k in range(x.ndim - 1) if x.shape[k] == size]


def _norm(weight: dict, bias: dict | None, x_a, x_b, y_a, y_b, u: float) -> bounds.Bound | None:
    from .operation import _number, _which_norm

    size = weight["shape"][0]
    if bias is not None and bias.get("shape") != weight["shape"]:
        return None
    gain = _number(weight, "absmax")
    offset = _number(bias, "absmax") if bias is not None else 0.0
    if gain is None or offset is None:
        return None
    for axis in _axes(x_a, size):
        xm, ym = _last(x_a, axis), _last(y_a, axis)
        centred = _which_norm(weight, bias, xm, ym, u)
        if centred is not None:
            what = ("LayerNorm" if centred else "RMSNorm") + f" over {size} (axis {axis} of {list(x_a.shape)})"
            return bounds.norm(xm, _last(x_b, axis), ym, _last(y_b, axis), u, gain * (1 + _SAMPLE_DIGITS),
                               offset * (1 + _SAMPLE_DIGITS), what)
    return None


def _scale(vector: dict, x_a, x_b, y_a, y_b, u: float) -> bounds.Bound | None:
    """``y = x ⊙ v`` along an axis of ``v``'s size, where a's output is that at the sampled positions within two
    roundings of each element (the product and a cast) and the samples' digits."""
    import torch

    from ...capture.numpy_parameters import sample_positions
    from .operation import _number

    shape, samples = vector.get("shape"), vector.get("samples")
    top = _number(vector, "absmax")
    if not isinstance(shape, list) or len(shape) != 1 or not isinstance(samples, list) or top is None \
            or x_a.shape != y_a.shape:
        return None
    size = shape[0]
    positions = sample_positions(size)
    if len(samples) != len(positions):
        return None
    v = torch.tensor([float(s) for s in samples], dtype=torch.float64)
    for axis in [x_a.ndim - 1, *_axes(x_a, size)]:
        if x_a.shape[axis] != size:
            continue
        xm, ym = _last(x_a, axis)[:, positions], _last(y_a, axis)[:, positions]
        allowed = 2 * u * ym.abs() + _SAMPLE_DIGITS * (xm * v).abs()
        if bool(((ym - xm * v).abs() <= allowed).all()) and float(ym.abs().max()) > 0:
            beta = top * (1 + _SAMPLE_DIGITS) * (x_b - x_a).abs() + 2 * u * (y_a.abs() + y_b.abs())
            return bounds.Bound(bounds._norm(y_b - y_a), bounds._norm(beta), f"scale by a vector of {size}",
                                "max|v|·|Δx| + 2u(|y_a|+|y_b|)")
    return None


def _convolution(weight: dict, bias: dict | None, x_a, x_b, y_a, y_b, u: float, float32: bool) -> bounds.Bound | None:
    from .operation import _number

    shape = weight["shape"]
    out, per_group, kernel = shape[0], shape[1], math.prod(shape[2:])
    if x_a.shape[0] != y_a.shape[0] or y_a.shape[1] != out or per_group <= 0 or x_a.shape[1] % per_group:
        return None
    groups = x_a.shape[1] // per_group
    if out % groups or (bias is not None and bias.get("shape") != [out]):
        return None
    w_norm = _number(weight, "norm")
    if w_norm is None:
        return None
    return bounds.convolution(x_a, x_b, y_a, y_b, u, w_norm * (1 + _SAMPLE_DIGITS), per_group * kernel, kernel,
                              float32)



def _batch_norm(held: dict[str, dict], x_a, x_b, y_a, y_b, u: float) -> bounds.Bound | None:
    import torch

    from ...capture.numpy_parameters import sample_positions
    from .operation import _number

    names = ("weight", "bias", "running_mean", "running_var")
    shape = held["weight"].get("shape")
    if not isinstance(shape, list) or len(shape) != 1 or any(held[n].get("shape") != shape for n in names):
        return None
    size = shape[0]
    if x_a.shape != y_a.shape or x_a.ndim < 2 or x_a.shape[1] != size:
        return None
    tops = [_number(held[n], "absmax") for n in names]
    low = _number(held["running_var"], "min")
    samples = [held[n].get("samples") for n in names]
    positions = sample_positions(size)
    if None in tops or low is None or low <= 0 or any(not isinstance(v, list) or len(v) != len(positions)
                                                      for v in samples):
        return None
    g, b, m, v = (torch.tensor([float(e) for e in values], dtype=torch.float64) for values in samples)
    lipschitz = tops[0] / math.sqrt(low) * (1 + _SAMPLE_DIGITS)
    x, y = _last(x_a, 1)[:, positions] - m, _last(y_a, 1)[:, positions] - b
    spread = x.square().sum(0)
    if not bool((spread > 0).all()):
        return None
    scale = (x * y).sum(0) / spread  # each sampled channel's scale, fitted
    if not bool((scale * g >= 0).all() and (scale.abs() * v.sqrt() <= g.abs() * (1 + 1e-3)).all()):
        return None  # a scale larger than the gain over the variance's root: no eps ≥ 0 gives it

    def rounding(xs, ys):
        return 6 * u * (lipschitz * (xs.abs() + tops[2]) + tops[1]) + 2 * u * ys.abs()

    own = rounding(_last(x_a, 1)[:, positions], _last(y_a, 1)[:, positions]) \
        + _SAMPLE_DIGITS * ((scale * x).abs() + (scale * m).abs() + b.abs())
    if not bool(((y - scale * x).abs() <= own).all()):
        return None
    beta = lipschitz * (x_b - x_a).abs() + rounding(x_a, y_a) + rounding(x_b, y_b)
    return bounds.Bound(bounds._norm(y_b - y_a), bounds._norm(beta), f"BatchNorm (eval) over {size} channels",
                        "L|Δx| + 6u(L|x| + L·max|μ| + max|b|) + 2u|y| per side, L = max|g|/√min(v)")
