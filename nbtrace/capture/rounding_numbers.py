"""The numbers of measured rounding, computed on the tensors' device: RMS norms over finite elements.

Every number is an absolute RMS (a norm: it obeys the triangle inequality, which is what lets a
verdict add measured roundings up). They are 0-dim float64 tensors on the device, stacked and
handed to the forward's ``HostBatch`` (``transfer.py``): they reach the host with the forward's one
transfer, never one at a time.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from .serialize import local_tensor, sanitize

ROOT = 0  # the key of the root call's numbers (the id of a call's JSON node is never 0)
_MAX_REASON = 300


def describe(exc: BaseException) -> str:
    """An exception in a few words, for a ``reason``."""
    text = sanitize(f"{type(exc).__name__}: {exc}")
    return text if len(text) <= _MAX_REASON else text[:_MAX_REASON] + "…"


def float_leaves(value: Any, place: str = "out", found: list[tuple[str, torch.Tensor]] | None = None,
                 depth: int = 0) -> list[tuple[str, torch.Tensor]]:
    """Every floating tensor of a call's raw output with its place name, as ``core.node.leaf_places`` names
    the recorded tree's (``out``, ``out.0``, ``out.logits``): lists and tuples by index, dicts by key."""
    if found is None:
        found = []
    if depth > 64:
        return found
    tensor = value if type(value) is torch.Tensor else local_tensor(value)
    if tensor is None and isinstance(value, torch.Tensor):
        tensor = value
    if tensor is not None:
        if tensor.is_floating_point():
            found.append((place, tensor))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            float_leaves(item, f"{place}.{i}", found, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            float_leaves(item, f"{place}.{_key(key)}", found, depth + 1)
    return found


def _key(key: Any) -> str:
    """A dict key as the trace files write it (``1`` -> ``"1"``, ``True`` -> ``"true"``)."""
    return json.dumps(key) if isinstance(key, (bool, float)) or key is None else str(key)


def _rms(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """RMS of ``values`` (zero where ``mask`` is False) over the ``mask``'s elements; NaN when there are none."""
    return (values.square().sum() / mask.sum()).sqrt()


def own_numbers(y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """``[own, scale, one]`` for a recorded output ``y`` and the float64 result ``z`` of the same call:
    RMS(y - z), RMS(z), RMS(z - z rounded to y's dtype), each over the elements where they are finite."""
    y64 = y.detach().to(torch.float64)
    z64 = z.detach().to(torch.float64)
    finite = torch.isfinite(z64)
    both = finite & torch.isfinite(y64)
    own = _rms(torch.where(both, y64 - z64, 0.0), both)
    scale = _rms(torch.where(finite, z64, 0.0), finite)
    rounded = z64.to(y.dtype).to(torch.float64)
    kept = finite & torch.isfinite(rounded)
    one = _rms(torch.where(kept, z64 - rounded, 0.0), kept)
    return torch.stack([own, scale, one])


def acc_numbers(y: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """``[acc, scale]``: RMS(y - truth) and RMS(truth), over finite elements (``truth``: the float64 forward's)."""
    y64 = y.detach().to(torch.float64)
    t64 = truth.detach().to(torch.float64)
    finite = torch.isfinite(t64)
    both = finite & torch.isfinite(y64)
    return torch.stack([_rms(torch.where(both, y64 - t64, 0.0), both), _rms(torch.where(finite, t64, 0.0), finite)])


def mismatch(y: torch.Tensor, z: Any) -> str | None:
    """Why the float64 result ``z`` cannot be compared with the recorded ``y`` (None when it can)."""
    if z is None:
        return "the float64 run gave no tensor there"
    if y.is_meta or z.is_meta:
        return "a tensor on the meta device holds no values"
    if tuple(z.shape) != tuple(y.shape):
        return f"the float64 run gave shape {list(z.shape)}, the recorded tensor has {list(y.shape)}"
    if z.device != y.device:
        return f"the float64 run gave a tensor on {z.device}, the recorded one is on {y.device}"
    return None
