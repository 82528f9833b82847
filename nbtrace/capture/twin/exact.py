"""Whether rounding a model and its inputs into a narrower dtype would change anything: then the rounded run is the twin.

A model stored in float32 gets a second float64 function beside its twin: the run with its weights and float inputs
rounded to bfloat16 (``forward.ROUNDED``), what a bfloat16 port of it computes exactly. Where every weight (the
``state_dict``'s float tensors, as ``forward._round`` takes them, an offloaded model's from where its hooks read them)
and every float top-level input ``forward.rounded_inputs`` would round already holds a bfloat16 value, that run would
compute the twin's numbers bit for bit: the same function of the same float64 values. That is common: a checkpoint
published in bfloat16 (most large language models) loaded in float32 for a reference run. The run is then not made,
and the twin's fingerprints stand for it: a float64 forward fewer, and a sidecar byte for byte the same.

In host memory each tensor is tested in turn and the first that rounding changes ends the test (a model of random
float32 weights: one tensor); on a device every tensor's answer is computed there and read in one transfer
(``transfer.values``, one per device), once per forward.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn

from .. import transfer
from .offload import offloaded_values

#: elements rounded at a time where a pair of dtypes has no test in place
PIECE = 2**20


def weights_and_inputs(live: nn.Module, args: tuple, kwargs: dict[str, Any], dtype: torch.dtype) -> list[torch.Tensor]:
    """The tensors rounding into ``dtype`` would change, if any: every float weight of ``live`` wider than ``dtype``
    (its ``state_dict``'s; where an offloading hook holds the values, those) and every float top-level input in plain
    lists, tuples and dicts (as ``forward.rounded_inputs`` walks them) of another dtype. Meta tensors are left out,
    as the rounded run leaves them."""
    offloaded = offloaded_values(live)
    found: list[torch.Tensor] = []
    seen: set[int] = set()
    for tensor in live.state_dict(keep_vars=True).values():
        if not isinstance(tensor, torch.Tensor) or id(tensor) in seen:
            continue
        seen.add(id(tensor))
        tensor = offloaded.get(id(tensor), (tensor, None))[0]
        if hasattr(tensor, "to_local"):  # a DTensor: this rank's piece
            tensor = tensor.to_local()
        found.append(tensor)
    _inputs((args, kwargs), found, 0)
    return [t for t in found if t.is_floating_point() and t.dtype != dtype and not t.is_meta
            and t.layout == torch.strided and t.numel()]


def _inputs(value: Any, found: list[torch.Tensor], depth: int) -> None:
    if isinstance(value, torch.Tensor):
        found.append(value)
    elif depth <= 8 and type(value) in (list, tuple):
        for item in value:
            _inputs(item, found, depth + 1)
    elif depth <= 8 and type(value) is dict:
        for item in value.values():
            _inputs(item, found, depth + 1)


def unchanged_by_rounding(tensors: list[torch.Tensor], dtype: torch.dtype) -> bool:
    """True when every tensor of ``tensors`` holds only values of ``dtype`` (rounding into it changes no bit; a NaN
    counts as changed). One answer per tensor, read at once where they live on a device."""
    flags = []
    for tensor in tensors:
        changed = _changed(tensor.detach(), dtype)
        if transfer.host_readable(changed):
            if bool(changed):
                return False
        else:
            flags.append(changed.reshape(1))
    if not flags:
        return True
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for flag in flags:
        by_device.setdefault(flag.device, []).append(flag)
    return not any(any(transfer.values(torch.cat(group).any().reshape(1))) for group in by_device.values())


def _changed(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A 0-d bool tensor on ``tensor``'s device: whether rounding it into ``dtype`` and back changes a value. No
    temporary the size of the tensor (a vocabulary's embedding is a fifth of a model): float32 into bfloat16 reads
    the lower halves of the values in place; another pair is rounded ``PIECE`` elements at a time."""
    with torch.no_grad(), torch._C.DisableTorchFunction():
        flat = tensor.contiguous().view(-1)
        if tensor.dtype == torch.float32 and dtype == torch.bfloat16:  # bfloat16 is float32's upper half
            lower = 0 if sys.byteorder == "little" else 1  # where each value's lower 16 bits are
            return flat.view(torch.int16)[lower::2].any()
        changed = [~(piece.to(dtype).to(piece.dtype) == piece).all() for piece in flat.split(PIECE)]
        return torch.stack(changed).any()
