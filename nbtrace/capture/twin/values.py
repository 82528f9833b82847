"""A call's inputs for a re-run: copied into float64, cast to a dtype, or moved to a device.

``upcast`` copies a call's arguments for its float64 twin: float tensors in float64, other tensors cloned,
lists, tuples and dicts rebuilt, any other object (a KV cache) deep-copied with its tensors upcast (``known``
maps objects already twinned, so a generation's float64 cache lives on from one step to the next); modules
inside are shared. ``cast`` converts float tensors to a dtype, ``to_device`` moves tensors, ``device_of`` says
where a module computes.
"""

from __future__ import annotations

import copy
from itertools import chain
from typing import Any

import torch
from torch import nn

from .offload import execution_device

MISSING = object()
_ATOMIC = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.layout)
_DEPTH = 8  # how deep inside an input object (a KV cache and its layers) tensors are looked for


def upcast(value: Any, known: dict[int, tuple[Any, Any]] | None = None) -> Any:
    """A float64 copy of a call's inputs (see the module docstring). ``known``: id of an object -> (the object,
    its twin), used instead of a new copy; new copies of objects that are neither tensors nor plain containers
    are added to it."""
    return _up(value, {}, known)


def remember(known: dict[int, tuple[Any, Any]], value: Any, twin: Any, depth: int = 4) -> None:
    """Note in ``known`` the twin of every object of ``value`` (a forward's output) that is neither a tensor nor
    a plain value, found at the same place of ``twin`` (its float64 twin): a KV cache made inside the forward."""
    if depth <= 0 or value is None or isinstance(value, (torch.Tensor, nn.Module, type)) or type(value) in _ATOMIC:
        return
    if isinstance(value, dict) and isinstance(twin, dict):
        for key, item in value.items():
            if key in twin:
                remember(known, item, twin[key], depth - 1)
        if type(value) is dict:
            return
    elif isinstance(value, (list, tuple)) and isinstance(twin, (list, tuple)) and len(value) == len(twin):
        for item, other in zip(value, twin):
            remember(known, item, other, depth - 1)
        if type(value) in (list, tuple):
            return
    if type(value) is type(twin) and value is not twin and not _is_model_output(value):
        known[id(value)] = (value, twin)


def _is_model_output(value: Any) -> bool:
    """A transformers ``ModelOutput`` (a forward's result, never handed to the next forward: its cache is, and is
    remembered on its own). Kept, each step's would stay in ``known`` for the rest of the block with its float64
    logits: a generation's memory growing by one vocabulary's worth per step and run."""
    return any(cls.__name__ == "ModelOutput" for cls in type(value).__mro__)


def _up(value: Any, memo: dict[int, Any], known: dict[int, tuple[Any, Any]] | None) -> Any:
    found = memo.get(id(value), MISSING)
    if found is not MISSING:
        return found
    if known is not None:
        entry = known.get(id(value))
        if entry is not None and entry[0] is value:
            return entry[1]
    kind = type(value)
    if isinstance(value, torch.Tensor):
        out: Any = _wide(value)
    elif kind in _ATOMIC or isinstance(value, (nn.Module, type)):
        return value
    elif kind is list:
        out = [_up(item, memo, known) for item in value]
    elif kind is tuple:
        out = tuple(_up(item, memo, known) for item in value)
    elif kind is dict:
        out = {key: _up(item, memo, known) for key, item in value.items()}
    else:
        _prefill(value, memo, _DEPTH)
        out = copy.deepcopy(value, memo)
        if known is not None:
            known[id(value)] = (value, out)
    memo[id(value)] = out
    return out


def _wide(tensor: torch.Tensor) -> torch.Tensor:
    tensor = tensor.detach()
    return tensor.to(torch.float64, copy=True) if tensor.is_floating_point() else tensor.clone()


def _prefill(value: Any, memo: dict[int, Any], depth: int) -> None:
    """Put the upcast copies of the tensors inside ``value`` (and its modules, shared) into ``memo``."""
    if depth <= 0 or id(value) in memo:
        return
    if isinstance(value, torch.Tensor):
        memo[id(value)] = _wide(value)
    elif isinstance(value, nn.Module):
        memo[id(value)] = value
    elif isinstance(value, (list, tuple)):
        for item in value:
            _prefill(item, memo, depth - 1)
    elif isinstance(value, dict):
        for item in value.values():
            _prefill(item, memo, depth - 1)
    elif type(value) not in _ATOMIC and hasattr(value, "__dict__"):
        for item in vars(value).values():
            _prefill(item, memo, depth - 1)


def device_of(module: nn.Module) -> torch.device:
    """Where ``module`` computes: its first parameter's or buffer's device (the CPU when it holds none); for one on
    the meta device, the device an offloading hook runs it on (``offload.py``)."""
    for tensor in chain(module.parameters(), module.buffers()):
        if tensor.is_meta:
            device = execution_device(module)
            if device is not None:
                return device
        return tensor.device
    return torch.device("cpu")


def to_device(value: Any, device: torch.device) -> Any:
    """``value`` with every tensor in it moved to ``device`` (dtypes unchanged; nothing copied when already there)."""
    return _each_tensor(value, lambda t: t if t.device == device else t.to(device))


def cast(value: Any, dtype: torch.dtype) -> Any:
    """``value`` with every float tensor in it converted to ``dtype`` (other values as they are)."""
    return _each_tensor(value, lambda t: t.to(dtype) if t.is_floating_point() else t)


def _each_tensor(value: Any, change: Any) -> Any:
    """``value`` rebuilt (tuples, lists, dicts) with ``change`` applied to every tensor in it."""
    if isinstance(value, torch.Tensor):
        return change(value)
    if isinstance(value, tuple):
        return tuple(_each_tensor(v, change) for v in value)
    if isinstance(value, list):
        return [_each_tensor(v, change) for v in value]
    if isinstance(value, dict):
        return {k: _each_tensor(v, change) for k, v in value.items()}
    return value
