"""A compact float64 fingerprint of a tensor: 16 random-sign sums of its values (a count sketch).

A tensor ``x`` of ``n`` elements is flattened in row-major order (so a reshape, or a leading size-1 dimension
broadcast, has the same fingerprint) and cut in chunks of ``L`` = 4096 elements. Element ``i`` of chunk ``c``
goes to sum ``i mod 16`` with the sign ``W[c]·S[i]``, both drawn once from fixed seeds on the host (the same on
every machine and device). The signs of any two elements are uncorrelated, so for the difference ``d`` of two
tensors of the same size the sum of the squares of the 16 sums of ``d`` has expectation ``‖d‖²``: the
difference of two fingerprints estimates ``‖a − b‖`` without either tensor (measured on random differences
spread over 30% of the elements: between 0.59 and 1.52 times the truth in 300 draws; exact when it sits in one
element).

What the fingerprint leaves out, identically on both sides: the rows of padding (``valid``: the model's
``(batch, sequence)`` attention mask, applied to tensors whose first dimension is the batch and that have a
sequence dimension), NaNs, and sentinels (``|x| >= 1e30``, infinities included: a mask's fill). It returns one
float64 tensor on ``x``'s device: the 16 sums, how many elements were kept, their sum of squares, and how many
valid elements were left out (NaNs and sentinels). Torch function modes (the twin's ``Widen``) do not see it, and
it reads nothing back to the host: its numbers join the forward's one transfer.

A tensor with three or more axes longer than one also gets ``AXIS_SUMS`` layout sums after those numbers
(``signs.axis_signs``): each element signed by the product of its axes' signs, so the same values held with their
axes in another order (channels last, heads before the sequence) have the same layout sums, and two layouts of
one tensor compare.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch

from .. import transfer
from .signs import (AXIS_SUMS, CHUNK, SEED_S, SENTINEL, SUMS, SUMSQ, WIDTH, axis_shape, axis_signs,
                    chunk_signs, sign_sequence, valid_shape)

_S: dict[torch.device, torch.Tensor] = {}
_W: dict[torch.device, torch.Tensor] = {}
_AXES: dict[tuple[int, torch.device], torch.Tensor] = {}


def element_and_chunk_signs(device: torch.device, chunks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The signs ``S`` of a chunk's elements and ``W`` of the first ``chunks`` chunks, float64 on ``device``,
    kept per device (``signs.py`` draws them)."""
    s = _S.get(device)
    if s is None:
        s = _S[device] = torch.tensor(sign_sequence(SEED_S, CHUNK), dtype=torch.float64, device=device)
    w = _W.get(device)
    if w is None or w.shape[0] < chunks:
        w = _W[device] = torch.tensor(chunk_signs(chunks), dtype=torch.float64, device=device)
    return s, w


def valid_elements(x: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor | None:
    """Where ``x`` holds real tokens: ``valid`` (``[batch, seq]``) broadcast over ``x`` (``signs.valid_shape``)."""
    shape = valid_shape(tuple(x.shape), tuple(valid.shape)) if valid is not None else None
    if shape is None:
        return None
    return (valid if valid.device == x.device else valid.to(x.device)).reshape(shape)


_ONES: list[tuple[Any, int, bool]] = []


def _all_ones(valid: torch.Tensor) -> bool:
    """Whether the padding mask ``valid`` (in host memory) is all ones: read once per mask object and version (every
    call of a forward is fingerprinted against the same mask)."""
    try:
        version = valid._version
    except RuntimeError:  # an inference-mode tensor keeps no version: read every time
        return bool(valid.all())
    if _ONES and _ONES[0][0]() is valid and _ONES[0][1] == version:
        return _ONES[0][2]
    found = bool(valid.all())
    try:
        _ONES[:] = [(weakref.ref(valid), version, found)]
    except TypeError:  # pragma: no cover  (a tensor that takes no weak reference)
        _ONES.clear()
    return found


def fingerprint(x: torch.Tensor, valid: torch.Tensor | None = None, layout: bool = True) -> torch.Tensor:
    """The fingerprint's ``WIDTH`` numbers of a floating tensor ``x`` (see the module docstring), on its device.

    Four passes over ``x`` and no read of its values on the host (no synchronisation on a GPU): what is kept
    (above ``-1e30``: a NaN, ``-inf`` and a mask's ``finfo.min`` are not), the kept values, the chunks summed with
    their signs in one matrix-vector product, the sum of squares; then the layout sums (``layout``: not for a
    fingerprint only ever compared with another of the same tensor's layout, a perturbed run's). A ``+inf`` or a
    huge positive value makes the sums non-finite, which the sidecar records as an element left out.

    In host memory, where reading a number costs no wait, most tensors hold nothing to leave out and their values
    are used as they are (the same numbers bit for bit: only the passes that would change nothing are skipped):
    ``_host_numbers``. On the small tensors of a model of many tiny calls the count of operations, not the passes,
    is the cost."""
    with torch._C.DisableTorchFunction():
        if x.requires_grad:
            x = x.detach()
        if x.is_complex():
            x = torch.view_as_real(x)
        if x.dtype != torch.float64:
            x = x.to(torch.float64)
        n = x.numel()
        axes = axis_shape(tuple(x.shape)) if layout else None
        if n and transfer.host_readable(x) and (valid is None or _all_ones(valid) or valid_elements(x, valid) is None):
            found = _host_numbers(x, n, axes)
            if found is not None:
                return found
        return _numbers_of(x, n, valid_elements(x, valid), axes)


def _host_numbers(x: torch.Tensor, n: int, axes: tuple[int, ...] | None) -> torch.Tensor | None:
    """The numbers of ``x`` (float64, in host memory, no padding to leave out) where nothing is to be left out, or
    None. The sum of squares comes first and decides it: below ``SENTINEL²`` (so no NaN, no infinity, no element at
    or beyond ``±SENTINEL``: a sum of squares is at least each square) nothing is left out and the values are used
    as they are, in the same operations as ``_numbers_of``'s. Anything else goes ``_numbers_of``'s way, which gives
    the same numbers for values it keeps whole (a huge positive one) as this would."""
    values = x.reshape(-1)
    sumsq = torch.dot(values, values)
    total = sumsq.item()
    if not total < _SQUARED_SENTINEL:  # a NaN compares False
        return None
    full, rest = divmod(n, CHUNK)
    if full:
        sums = _signed_sums(values)
    else:  # one chunk or less: signed into a zeroed scratch chunk, summed by slot, the scratch zeroed again
        chunk, rows, signs = _scratch(rest)
        torch.mul(values, signs, out=chunk)
        sums = torch.sum(rows, 0)
        chunk.zero_()
    pieces = (sums, _count(n), sumsq.view(1), _ZERO)  # the count kept, the sum of squares, none left out
    return torch.cat(pieces if axes is None else (*pieces, layout_sums(values, axes)))


_SQUARED_SENTINEL = SENTINEL * SENTINEL
_LOCAL = threading.local()
_ZERO = torch.zeros(1, dtype=torch.float64)
#: per count of elements: that count as a one-element float64 tensor in host memory (making one costs more than a join)
_COUNTS: dict[int, torch.Tensor] = {}


def _count(n: int) -> torch.Tensor:
    found = _COUNTS.get(n)
    if found is None:
        found = torch.tensor([float(n)], dtype=torch.float64)
        if len(_COUNTS) < 4096:
            _COUNTS[n] = found
    return found


def _scratch(rest: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A zeroed host chunk of ``CHUNK`` float64 slots (one per thread), its first ``rest`` slots, all of it as rows of
    ``SUMS``, and ``W[0]·S``'s first ``rest`` signs: the views kept per ``rest`` (making one is an operation too)."""
    views = getattr(_LOCAL, "views", None)
    if views is None:
        views = _LOCAL.views = {}
        _LOCAL.chunk = torch.zeros(CHUNK, dtype=torch.float64)
    found = views.get(rest)
    if found is None:
        chunk = _LOCAL.chunk
        found = views[rest] = (chunk[:rest], chunk.view(-1, SUMS),
                               _first_chunk_signs(torch.device("cpu"))[:rest])
    return found


def _numbers_of(x: torch.Tensor, n: int, keep: torch.Tensor | None, axes: tuple[int, ...] | None) -> torch.Tensor:
    """The fingerprint's numbers of ``x`` (float64) by the general way: what ``keep`` (the padding) and the sentinel
    leave out is left out. In host memory a tensor with nothing to leave out but the padding skips the passes that
    would change nothing."""
    width = WIDTH if axes is None else WIDTH + AXIS_SUMS
    if n and transfer.host_readable(x) and keep is not None and x.min().item() > -SENTINEL:  # a NaN's is NaN
        values = torch.where(keep, x, 0.0).reshape(-1)  # only the padding is left out, as below
        kept = float(int(keep.sum()) * (n // keep.numel()))
        out = torch.tensor([0.0] * SUMS + [kept] + [0.0] * (width - SUMS - 1), dtype=torch.float64,
                           device=x.device)
    else:
        ok = x > -SENTINEL
        if keep is not None:
            ok = ok & keep
            counted = keep.sum().to(torch.float64) * (n // keep.numel())
        else:
            counted = torch.tensor(float(n), dtype=torch.float64, device=x.device)
        values = torch.where(ok, x, 0.0).reshape(-1)
        kept = ok.sum().to(torch.float64)
        out = torch.cat([torch.zeros(SUMS, dtype=torch.float64, device=x.device),
                         torch.stack([kept, kept, counted - kept]),
                         torch.zeros(width - WIDTH, dtype=torch.float64, device=x.device)])
    out[:SUMS] = _signed_sums(values)
    torch.dot(values, values, out=out[SUMSQ])
    if axes is not None:
        layout_sums(values, axes, out[WIDTH:])
    return out


def _signed_sums(values: torch.Tensor) -> torch.Tensor:
    """The 16 sums of ``values`` (float64, flat): each chunk's elements times its sign ``W[c]`` added into 4096 slots
    (one matrix-vector product for the whole chunks), the slots times ``S``, summed by slot modulo 16. A tensor of
    one chunk or less is signed by ``W[0]·S`` in one product. The terms are those of the slots' products bit for bit
    but for the sign of a zero, which no sum can show (torch's sum starts from +0.0)."""
    n = values.numel()
    full, rest = divmod(n, CHUNK)
    s, w = element_and_chunk_signs(values.device, full + 1)
    if not full:
        folded = torch.zeros(CHUNK, dtype=torch.float64, device=values.device)
        torch.mul(values, _first_chunk_signs(values.device)[:rest], out=folded[:rest])
    else:
        folded = w[:full] @ values[: full * CHUNK].view(full, CHUNK)
        if rest:
            folded[:rest] += w[full] * values[full * CHUNK:]
        folded *= s
    return torch.sum(folded.view(-1, SUMS), 0)


_FIRST: dict[torch.device, torch.Tensor] = {}


def _first_chunk_signs(device: torch.device) -> torch.Tensor:
    """``W[0]·S``: the signs of the elements of a tensor of one chunk or less, kept per device."""
    found = _FIRST.get(device)
    if found is None:
        s, w = element_and_chunk_signs(device, 1)
        found = _FIRST[device] = w[0] * s
    return found


def axis_sign_rows(size: int, device: torch.device) -> torch.Tensor:
    """The layout sums' signs of an axis of ``size``: ``[size, AXIS_SUMS]``, float64 on ``device``, kept."""
    found = _AXES.get((size, device))
    if found is None:
        found = _AXES[size, device] = torch.tensor(axis_signs(size), dtype=torch.float64,
                                                   device=device).view(size, AXIS_SUMS)
    return found


def layout_sums(values: torch.Tensor, axes: tuple[int, ...], out: torch.Tensor | None = None) -> torch.Tensor:
    """The ``AXIS_SUMS`` layout sums of ``values`` (float64, flat) held in ``axes`` (``signs.axis_shape``): the last
    axis contracted with its signs in one matrix product, then each earlier one, last to first; written into
    ``out`` (``AXIS_SUMS`` contiguous float64 numbers) where given."""
    found = values.view(-1, axes[-1]) @ axis_sign_rows(axes[-1], values.device)
    for size in reversed(axes[1:-1]):
        found = (found.view(-1, size, AXIS_SUMS) * axis_sign_rows(size, values.device)).sum(1)
    found = found.view(-1, axes[0], AXIS_SUMS) * axis_sign_rows(axes[0], values.device)
    if out is None:
        return found.sum(1).view(AXIS_SUMS)
    torch.sum(found, 1, out=out.view(1, AXIS_SUMS))
    return out
