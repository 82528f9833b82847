"""The fixed pseudo-random sequence the float64 twin's perturbed runs move each stored tensor by (``forward.py``).

``noise(n, start, device)``: ``n`` numbers in [-1, 1) from a sequence of ``65521`` (a prime: tiles of it never line
up with a tensor's rows) drawn once from a fixed seed, read from ``start`` on (a place drawn from the tensor's name)
and tiled; ``scale_by_noise(tensor, start)``: the tensor times ``1 + 2⁻⁵³·r`` in place, one float64 rounding.
"""

from __future__ import annotations

import random

import torch

_NOISE: dict[torch.device, torch.Tensor] = {}
_FACTORS: dict[torch.device, torch.Tensor] = {}
_NOISE_LENGTH = 65521  # a prime: tiles of the sequence never line up with a tensor's rows


def scale_by_noise(tensor: torch.Tensor, start: int) -> None:
    """``tensor *= 1 + 2⁻⁵³·r`` in place, ``r`` the noise sequence from ``start`` (``noise``), in one pass and with
    no copy of the sequence: the tensor's flat values are cut where the sequence starts again."""
    tensor = tensor.to_local() if hasattr(tensor, "to_local") else tensor  # a DTensor: this rank's piece
    factors = _FACTORS.get(tensor.device)
    if factors is None:
        factors = _FACTORS[tensor.device] = 1 + 2.0**-53 * noise(_NOISE_LENGTH, 0, tensor.device)
    flat = tensor.view(-1) if tensor.is_contiguous() else None
    if flat is None:  # a strided tensor attribute: the slower way, the same numbers
        tensor.mul_(factors.repeat(-(-(tensor.numel() + _NOISE_LENGTH) // _NOISE_LENGTH))[
            start % _NOISE_LENGTH:start % _NOISE_LENGTH + tensor.numel()].view(tensor.shape))
        return
    start %= _NOISE_LENGTH
    head = min(flat.numel(), _NOISE_LENGTH - start)
    flat[:head].mul_(factors[start:start + head])
    whole = (flat.numel() - head) // _NOISE_LENGTH
    if whole:
        flat[head:head + whole * _NOISE_LENGTH].view(whole, _NOISE_LENGTH).mul_(factors)
    tail = flat.numel() - head - whole * _NOISE_LENGTH
    if tail:
        flat[flat.numel() - tail:].mul_(factors[:tail])


def noise(numel: int, start: int, device: torch.device) -> torch.Tensor:
    """``numel`` numbers of the sequence from ``start`` on (tiled), float64 on ``device``."""
    base = _NOISE.get(device)
    if base is None:
        rng = random.Random(0x5EED)
        base = _NOISE[device] = torch.tensor([2.0 * rng.random() - 1.0 for _ in range(_NOISE_LENGTH)],
                                             dtype=torch.float64, device=device)
    start %= _NOISE_LENGTH
    repeats = -(-(numel + start) // _NOISE_LENGTH)
    return (base.repeat(repeats) if repeats > 1 else base)[start:start + numel]
