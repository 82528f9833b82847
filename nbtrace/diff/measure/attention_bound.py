"""Scaled dot-product attention between a call's projections, computed exactly, and what a correct kernel rounds.

An attention's core is code between its children (``q_proj``, ``k_proj``, ``v_proj`` made the inputs, ``o_proj``
reads the result): no module holds it. Where the files hold those tensors in full, the core's function can be
computed from them in float64: heads of size ``d`` (the rotary tables' last size), rotary embedding by
``rotate_half`` where tables are given, grouped key/value heads repeated, logits scaled by ``1/√d`` plus the
recorded additive (or boolean) mask, softmax over keys, the weighted sum of values. ``attention`` returns that
result; ``rounding`` the 2-norm of how far a correct kernel of any kind (eager, sdpa, flash-style with online
softmax and probabilities rounded to the dtype) may be from it, from first-order error analysis:

- a logit ``s_ij`` is off by at most ``δ_ij ≤ (γ_d + 2u_op + 14u)·|s|-scale ||q_i|| ||k_j|| / √d`` (the products
  and their float32 sum, the rotary's two products and sum for ``q`` and ``k``, the scaling and the mask's add);
- probabilities then move by ``‖Δp_i‖₁ ≤ e^{2 max_j δ_ij} − 1``, and are rounded (exp, sum, divide, a cast to the
  dtype: ``γ_S + 4u``);
- the weighted sum adds ``(γ_S + 2u_op + u)·max_j ||v_j||`` and the result's cast ``u·||o_i||``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .bounds import U32

if TYPE_CHECKING:  # pragma: no cover
    import torch


def _heads(x: torch.Tensor, d: int) -> torch.Tensor:
    """``[B, S, H·d]`` as ``[B, H, S, d]``."""
    b, s, width = x.shape
    return x.reshape(b, s, width // d, d).transpose(1, 2)


def _rotate(x: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None) -> torch.Tensor:
    if cos is None or sin is None:
        return x
    half = x.shape[-1] // 2
    turned = __import__("torch").cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.unsqueeze(1) + turned * sin.unsqueeze(1)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, d: int, cos: torch.Tensor | None,
              sin: torch.Tensor | None, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact result ``[B, S, H·d]`` (float64 in, float64 out) and the probabilities ``[B, H, S, S]``."""
    import torch

    qh, kh, vh = _rotate(_heads(q, d), cos, sin), _rotate(_heads(k, d), cos, sin), _heads(v, d)
    groups = qh.shape[1] // kh.shape[1]
    kh, vh = kh.repeat_interleave(groups, dim=1), vh.repeat_interleave(groups, dim=1)
    scores = qh @ kh.transpose(-1, -2) / math.sqrt(d)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    out = probs @ vh
    return out.transpose(1, 2).reshape(q.shape[0], q.shape[1], -1), probs


def rounding(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, d: int, u: float, u_op: float,
             rows: torch.Tensor | None) -> float:
    """How far a correct kernel's result may lie from ``attention(...)`` (2-norm over the query rows kept by
    ``rows``, a ``[B, S]`` mask of real tokens; see the module docstring)."""
    import torch

    qh, kh, vh, oh = _heads(q, d), _heads(k, d), _heads(v, d), _heads(out, d)
    groups = qh.shape[1] // kh.shape[1]
    kh, vh = kh.repeat_interleave(groups, dim=1), vh.repeat_interleave(groups, dim=1)
    keys = kh.shape[2]
    q_norm, k_norm = qh.norm(dim=-1), kh.norm(dim=-1)  # [B, H, S]
    v_max = vh.norm(dim=-1).amax(-1, keepdim=True)  # [B, H, 1]
    logit = (d * U32 + 2 * u_op + 14 * u) / math.sqrt(d) * q_norm * k_norm.amax(-1, keepdim=True)
    moved = torch.expm1(2 * logit) + keys * U32 + 4 * u
    per = moved * v_max + (keys * U32 + 2 * u_op + u) * v_max + u * oh.norm(dim=-1)  # [B, H, S]
    per = per.square().sum(1)  # [B, S]
    if rows is not None and tuple(rows.shape) == tuple(per.shape):
        per = per[rows]
    return float(per.sum().sqrt())
