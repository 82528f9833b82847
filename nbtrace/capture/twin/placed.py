"""The fingerprint of one piece of a tensor, where the piece sits in the whole: a shard's share of the whole's.

The fingerprint (``fingerprint.py``) is linear in the values: element ``g`` of the whole tensor, flattened in
row-major order, goes to sum ``g mod 16`` with the sign ``W[g // 4096]·S[g mod 4096]``. A rank that holds a block
of the whole (a ``Shard(d)`` piece: its local tensor and the offset of its first element in each dimension) can
compute its block's share with the signs of the positions its elements hold in the whole; the shares of the pieces
that tile the whole add up to the whole's fingerprint (exactly, up to float64's summation order), and so do the
counts of kept and left-out elements and the sums of squares; and so do the layout sums (each element signed by
one sign per axis, drawn by the whole's axis size, at the index the element holds along it). Nothing is gathered: 28 numbers per piece cross
between ranks (``ranks.py``), never the tensor.

The padding mask (``valid``, the run's ``(batch, sequence)`` mask) applies to the whole's shape, so each piece
takes the slice of it its block covers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .fingerprint import axis_sign_rows, element_and_chunk_signs
from .signs import AXIS_RANK, AXIS_SUMS, CHUNK, SENTINEL, SUMS, WIDTH, valid_shape


def _strides(shape: Sequence[int]) -> list[int]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return strides[::-1]


def placed_fingerprint(x: torch.Tensor, whole: Sequence[int], offset: Sequence[int],
                       valid: torch.Tensor | None = None, layout: bool = False) -> torch.Tensor:
    """The share of the block ``x`` (a plain local tensor) in the fingerprint of a tensor of shape ``whole``, the
    block starting at ``offset`` in each dimension: ``WIDTH`` float64 numbers on ``x``'s device (the 16 sums, the
    kept elements, their sum of squares, the valid elements left out), which add up over the blocks that tile the
    whole to ``fingerprint(whole tensor, valid)``; with ``layout``, where the whole has three or more axes longer
    than one, its share of the layout sums follows (each axis's signs drawn by the whole's size, at the rows the
    block holds), which adds up to the whole's too."""
    with torch._C.DisableTorchFunction():
        x = x.detach()
        whole, offset = list(whole), list(offset)
        if x.is_complex():
            x = torch.view_as_real(x)
            whole, offset = whole + [2], offset + [0]
        if x.dim() != len(whole) or any(o + s > w for o, s, w in zip(offset, x.shape, whole)):
            raise ValueError(f"a block of shape {list(x.shape)} at {offset} is not inside a tensor of shape {whole}")
        x = x.to(torch.float64)
        device = x.device
        wide = layout and sum(1 for n in whole if n != 1) >= AXIS_RANK
        if x.numel() == 0:
            return torch.zeros(WIDTH + (AXIS_SUMS if wide else 0), dtype=torch.float64, device=device)
        index = torch.zeros((), dtype=torch.int64, device=device)
        for dim, (size, start, stride) in enumerate(zip(x.shape, offset, _strides(whole))):
            shape = [1] * x.dim()
            shape[dim] = size
            index = index + ((torch.arange(size, device=device) + start) * stride).view(shape)
        index = index.expand(x.shape).reshape(-1)
        ok = x > -SENTINEL
        keep = _valid_block(x, whole, offset, valid)
        if keep is not None:
            ok = ok & keep
            counted = keep.sum().to(torch.float64) * (x.numel() // keep.numel())
        else:
            counted = torch.tensor(float(x.numel()), dtype=torch.float64, device=device)
        values = torch.where(ok, x, 0.0).reshape(-1)
        s, w = element_and_chunk_signs(device, -(-max(1, _numel(whole)) // CHUNK))
        # as ``fingerprint`` sums: each chunk's elements with its sign into 4096 slots, then the slots into 16 sums
        folded = torch.zeros(CHUNK, dtype=torch.float64, device=device).index_add_(
            0, index % CHUNK, values * w[index // CHUNK])
        sums = (folded * s).view(-1, SUMS).sum(0)
        kept = ok.sum().to(torch.float64)
        numbers = torch.cat([sums, torch.stack([kept, torch.dot(values, values), counted - kept])])
        return torch.cat([numbers, _layout_share(values.view(x.shape), whole, offset)]) if wide else numbers


def _layout_share(values: torch.Tensor, whole: Sequence[int], offset: Sequence[int]) -> torch.Tensor:
    """The block's share of the whole's ``AXIS_SUMS`` layout sums (``fingerprint.layout_sums``): over the axes the
    whole holds longer than one, the last contracted with its signs' rows the block covers, then each earlier one."""
    dims = [d for d, n in enumerate(whole) if n != 1]
    block = values.reshape([values.shape[d] for d in dims])  # the whole's axes of one are the block's too
    rows = [axis_sign_rows(whole[d], values.device)[offset[d]:offset[d] + block.shape[k]] for k, d in enumerate(dims)]
    found = block.reshape(-1, block.shape[-1]) @ rows[-1]
    for k in reversed(range(len(dims) - 1)):
        found = (found.view(-1, block.shape[k], AXIS_SUMS) * rows[k]).sum(1)
    return found.view(AXIS_SUMS)


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for size in shape:
        n *= size
    return n


def _valid_block(x: torch.Tensor, whole: Sequence[int], offset: Sequence[int],
                 valid: torch.Tensor | None) -> torch.Tensor | None:
    """The padding mask over the block: the whole's broadcast mask (``signs.valid_shape``) sliced to the block."""
    if valid is None:
        return None
    shape = valid_shape(tuple(whole), tuple(valid.shape))
    if shape is None:
        return None
    mask = (valid if valid.device == x.device else valid.to(x.device)).reshape(shape)
    for dim, size in enumerate(shape):
        if size != 1:
            mask = mask.narrow(dim, offset[dim], x.shape[dim])
    return mask
