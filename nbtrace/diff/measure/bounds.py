"""The largest difference any correct implementation of one operation could make from the inputs it was given.

Two folders without a float64 twin hold, for one call, its inputs ``x_a``, ``x_b`` and its outputs ``y_a``,
``y_b``. Error analysis of the operation bounds, element by element, how far a correct implementation can be from
the exact function (its rounding: a few units of the unit roundoff ``u`` per operation, ``γ_n = n·u`` for a sum of
``n`` terms) and how far the exact function moves when its inputs move (its derivative's bound times ``|x_b −
x_a|``). The bound between the two sides is the sum of both sides' rounding and the move; a difference beyond its
2-norm (``‖y_b − y_a‖ > ‖β‖``) is one no correct implementation of the same function produces from those inputs.

Nothing here is tuned: every constant counts roundings. What an implementation may do is taken widely: products
of a float32 linear map may use TF32 operands (10 mantissa bits, ``2^-11``), half types may compute every step in
their own dtype (an RMSNorm without its float32 upcast), and reductions accumulate in float32 or wider (every
framework's sum of half types does). Arrays are float64 torch matrices (rows x last dimension), padding rows out.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import torch

U32 = 2.0**-24  # reductions accumulate in float32 or wider
TF32 = 2.0**-11  # the products of a float32 matrix product may round their operands to 10 mantissa bits


@dataclass
class Bound:
    """One call's difference against the largest a correct implementation could make (2-norms over the
    compared elements): ``what`` names the operation, ``formula`` the bound in a few symbols."""

    difference: float
    allowed: float
    what: str
    formula: str

    @property
    def score(self) -> float:
        if self.allowed > 0:
            return self.difference / self.allowed
        return math.inf if self.difference > 0 else 0.0


def _norm(x: torch.Tensor) -> float:
    return float(x.square().sum().sqrt())


# -- elementwise functions ------------------------------------------------------------------------------------
def _functions() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    import torch

    def gelu(x):
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))

    def gelu_tanh(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))

    return {
        "GELU": gelu, "GELU (tanh approximation)": gelu_tanh, "SiLU": lambda x: x * torch.sigmoid(x),
        "quick GELU": lambda x: x * torch.sigmoid(1.702 * x), "ReLU": torch.relu, "tanh": torch.tanh,
        "sigmoid": torch.sigmoid, "identity (dropout, drop path at eval)": lambda x: x,
    }


@functools.lru_cache(maxsize=1)
def slopes() -> dict[str, float]:
    """Each known elementwise function's ``sup |f'|``, from central differences (float64, step 1e-5: exact to about
    1e-10) on a fine grid over ``[-10, 10]``, where the slope has its extremes (beyond, each tends monotonically to 0
    or 1), rounded up. No autograd: a comparison may run under ``torch.no_grad()`` or ``inference_mode()``."""
    import torch

    x, h = torch.linspace(-10.0, 10.0, 20_001, dtype=torch.float64), 1e-5
    found = {}
    for name, f in _functions().items():
        slope = (f(x + h) - f(x - h)) / (2 * h)
        found[name] = math.ceil(float(slope.abs().max()) * 1e4) / 1e4
    return found


def identify(x: torch.Tensor, y: torch.Tensor, u: float) -> str | None:
    """Which known elementwise function the reference computed (``y`` within its own rounding of ``f(x)``)."""
    import torch

    finite = torch.isfinite(x) & torch.isfinite(y)
    x, y = x[finite], y[finite]
    if x.numel() < 16 or float(x.abs().max()) == 0:
        return None
    for name, f in _functions().items():
        own = _elementwise_rounding(x, y, u, slopes()[name])
        if _norm(y - f(x)) <= _norm(own) and float((y - f(x)).abs().max()) <= float(own.max()) * 4:
            return name
    return None


def _elementwise_rounding(x: torch.Tensor, y: torch.Tensor, u: float, slope: float) -> torch.Tensor:
    """One side's rounding of ``f(x)``: three roundings of the result (the function's own steps and the cast) and
    two of its argument inside the kernel (``x/√2``, ``1.702·x``), moved by the slope."""
    return 3 * u * y.abs() + 2 * u * slope * x.abs()


def elementwise(name: str, x_a: torch.Tensor, x_b: torch.Tensor, y_a: torch.Tensor, y_b: torch.Tensor,
                u: float) -> Bound:
    """``|y_b − y_a| ≤ L·|x_b − x_a| + r_a + r_b`` per element, ``L = sup |f'|``."""
    slope = slopes()[name]
    beta = slope * (x_b - x_a).abs() + _elementwise_rounding(x_a, y_a, u, slope) \
        + _elementwise_rounding(x_b, y_b, u, slope)
    return Bound(_norm(y_b - y_a), _norm(beta), name,
                 f"L|Δx| + 3u(|y_a|+|y_b|) + 2uL(|x_a|+|x_b|), L = sup|f'| = {slope:g}")


# -- norms ----------------------------------------------------------------------------------------------------
def normalized(x: torch.Tensor, centred: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x − m)/s`` per row without eps (``m``: the row's mean for a LayerNorm, 0 for an RMSNorm), and ``s``."""
    z = x - x.mean(-1, keepdim=True) if centred else x
    s = z.square().mean(-1, keepdim=True).sqrt()
    return z / s.clamp_min(1e-300), s


def norm(x_a: torch.Tensor, x_b: torch.Tensor, y_a: torch.Tensor, y_b: torch.Tensor, u: float, gain: float,
         bias: float, what: str) -> Bound:
    """A LayerNorm or RMSNorm over the last dimension ``D`` with gains of at most ``gain`` (``|g|``'s max) and
    biases of at most ``bias``. Its Jacobian has norm at most ``gain/s`` (``s ≥`` the row's standard deviation, as
    eps ≥ 0 and the centring is a projection); along the segment from ``x_a`` to ``x_b`` the standard deviation is
    at least ``std(x_a) − rms(Δx)``. Rounding per side: the squares, the root and the two products in the
    computing dtype (``4u``), the sum of ``D`` squares accumulated in float32 (``γ_D/2`` through the root), the
    cast (``u``), relative to ``|y − b|``; and the centring's ``(u + γ_D)·gain·(|x| + rms(x))/s``."""
    import torch

    d = x_a.shape[-1]
    dx = x_b - x_a
    spread = (x_a - x_a.mean(-1, keepdim=True)).square().mean(-1, keepdim=True).sqrt()
    moved = dx.square().mean(-1, keepdim=True).sqrt()
    low = (spread - moved).clamp_min(0.0)
    row_move = gain * dx.square().sum(-1, keepdim=True).sqrt() / low.clamp_min(1e-300)
    row_move = torch.where(low > 0, row_move, torch.full_like(row_move, math.inf))
    relative = 5 * u + d * U32 / 2

    def rounding(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        _, s = normalized(x, True)
        rms = x.square().mean(-1, keepdim=True).sqrt()
        return relative * (y.abs() + bias) + (u + d * U32) * gain * (x.abs() + rms) / s.clamp_min(1e-300)

    beta_rows = (rounding(x_a, y_a).square().sum(-1, keepdim=True).sqrt()
                 + rounding(x_b, y_b).square().sum(-1, keepdim=True).sqrt() + row_move)
    return Bound(_norm(y_b - y_a), _norm(beta_rows), what,
                 "g|Δx|/(std(x) − rms(Δx)) + (5u + γ_D/2)(|y_a|+|y_b|) + centring")


# -- linear maps ----------------------------------------------------------------------------------------------
def linear(x_a: torch.Tensor, x_b: torch.Tensor, y_a: torch.Tensor, y_b: torch.Tensor, u: float, w_norm: float,
           float32: bool) -> Bound:
    """``y = x Wᵀ (+ b)`` with inner size ``n`` and ``‖W‖_F = w_norm``, row by row: ``‖Δy_i‖ ≤ ‖W‖_F‖Δx_i‖`` for
    the move, and per side ``(γ_n + 2u_op + 2u)·‖x_i‖·‖W‖_F`` for the rounding (``Σ_k |x_ik||W_jk|`` over ``j`` by
    Cauchy-Schwarz): products of operands rounded to ``u_op`` (TF32's for float32, else the dtype's), sums in
    float32, partial sums and the result rounded in the dtype."""
    n = x_a.shape[-1]
    u_op = TF32 if float32 else u
    per = (n * U32 + 2 * u_op + 2 * u) * w_norm
    rows = lambda t: t.square().sum(-1).sqrt()  # noqa: E731
    beta = w_norm * rows(x_b - x_a) + per * (rows(x_a) + rows(x_b))
    return Bound(_norm(y_b - y_a), _norm(beta), f"linear map of inner size {n}",
                 f"‖W‖_F‖Δx‖ + (γ_{n} + 2u_op + 2u)‖W‖_F(‖x_a‖+‖x_b‖)")


def convolution(x_a: torch.Tensor, x_b: torch.Tensor, y_a: torch.Tensor, y_b: torch.Tensor, u: float,
                w_norm: float, n: int, window: int, float32: bool) -> Bound:
    """A convolution (any stride, padding, dilation, groups) with ``‖W‖_F = w_norm``, ``n = (in/groups)·window``
    products per output element and ``window`` kernel positions. Each output element is one row of its group's
    weights against a window of its input, so by Cauchy-Schwarz ``|Σ w·x| ≤ ‖w_j‖·‖x_window‖``; every input element
    lies in at most ``window`` windows, so summed over outputs ``‖W * x‖ ≤ √window·‖W‖_F·‖x‖`` (padding only leaves
    terms out). The move is that of ``Δx``; each side's rounding ``linear``'s per element, summed the same way."""
    scale = math.sqrt(window) * w_norm
    per = n * U32 + 2 * (TF32 if float32 else u) + 2 * u
    beta = scale * (_norm(x_b - x_a) + per * (_norm(x_a) + _norm(x_b)))
    return Bound(_norm(y_b - y_a), beta, f"convolution of {n} products per output",
                 f"√k·‖W‖_F(‖Δx‖ + (γ_{n} + 2u_op + 2u)(‖x_a‖+‖x_b‖)), k = {window} kernel positions")


def lookup(y_a: torch.Tensor, y_b: torch.Tensor) -> Bound:
    """An embedding's rows looked up for the same ids from the same table: exact."""
    return Bound(_norm(y_b - y_a), 0.0, "embedding lookup", "0: the same rows of the same table")
