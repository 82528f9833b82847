"""Whether a model's float64 twin fits where the model lives: what ``measure_rounding="auto"`` decides by.

The twin is streamed (``stream.py``): it holds the float64 weights of one module at a time (a large embedding's or
linear layer's in pieces), a float64 copy of every float buffer and tensor attribute (8 bytes an element), and the
float64 activations of one forward
(``streamed_cost``; ``twin_cost`` is what a whole float64 copy would take). It is recorded by default when that
takes at most half the memory free on each of the model's devices (the host's available memory for the CPU,
``cuda.mem_get_info`` for a GPU); otherwise, and for parameters on the meta device that no offloading hook holds,
it is not, and the trace says why in one line. Under ``torch.distributed`` with several ranks each rank asks this
of its own copy (a DTensor parameter by the piece the rank holds, as its float64 copy holds it) and the ranks
decide together
(``ranks.decide_together``).
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import torch
from torch import nn

from .host_memory import SHARE, available_host_memory
from .offload import offloaded_values
from .stream import local_numel, streamed_cost


def twin_cost(model: nn.Module, offloaded: dict[int, tuple[torch.Tensor, Any]] | None = None
              ) -> dict[torch.device, int]:
    """Bytes of the float64 copy of ``model``'s float tensors, per device (``offloaded``: ``offloaded_values(model)``,
    where the caller has it already)."""
    cost: dict[torch.device, int] = {}
    seen: set[int] = set()
    offloaded = offloaded_values(model) if offloaded is None else offloaded
    for tensor in chain(model.parameters(), model.buffers()):
        if id(tensor) in seen or not tensor.is_floating_point():
            continue
        seen.add(id(tensor))
        value, device = offloaded.get(id(tensor), (tensor, None))  # an offloaded one: where its module runs
        where = torch.device(device) if device is not None else value.device
        cost[where] = cost.get(where, 0) + 8 * local_numel(tensor)
    return cost


def free_memory(device: torch.device) -> int | None:
    """Bytes free on ``device`` (None when it cannot be told)."""
    if device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except (RuntimeError, AssertionError):
            return None
    if device.type == "cpu":
        return available_host_memory()
    return None


def twin_unfit(model: nn.Module) -> str | None:
    """Why ``model``'s twin is not recorded by default (None: it fits)."""
    offloaded = offloaded_values(model)
    for tensor in chain(model.parameters(), model.buffers()):
        if type(tensor) not in (torch.Tensor, nn.Parameter) and not isinstance(tensor, nn.Parameter):
            return f"its parameters are {type(tensor).__name__}s, not plain tensors"
        if tensor.device.type == "meta" and id(tensor) not in offloaded:
            return "its parameters are on the meta device, and no offloading hook holds their values"
    for device, needed in streamed_cost(model).items():
        free = free_memory(device)
        if free is not None and needed > SHARE * free:
            return (f"even streamed (one module's weights at a time), its float64 twin needs {needed / 2**30:.1f} GiB "
                    f"on {device}, more than half the {free / 2**30:.1f} GiB free")
    return None
