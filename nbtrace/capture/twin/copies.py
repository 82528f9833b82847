"""A live module copied into another dtype (float64 for a twin, float32 for a truth's precision), never touching it.

``copy_in(module, dtype)`` builds the copy module by module rather than by ``copy.deepcopy`` (ten times its
speed on a layer block): each module a new object of its class whose float parameters, buffers and plain tensor
attributes (a rotary embedding's cached frequencies) are converted to ``dtype`` with no copy in their own dtype
first, other tensors cloned, tied ones staying tied; submodules copied the same way; dicts, lists and sets copied
one level deep (what a forward adds to them stays in the copy); methods bound to a module rebound to its copy;
numbers, strings, dtypes, devices, functions and classes shared; any other object (a config, a cache) deep-copied
as ``deepcopy`` would. A class with its own copy or pickle protocol is deep-copied whole.

nbtrace's forward wrappers (``capture/context.py``) carry what the module's ``forward`` attribute was before them
(``mark_wrapper``), so a copy of a module being traced runs the module's own code, never the recorder.
``non_state_constants`` names the float tensors a module holds outside its ``state_dict`` (non-persistent
buffers, tensor attributes): what each implementation computes for itself rather than loads.
"""

from __future__ import annotations

import copy
import enum
import functools
import sys
import types
from collections import OrderedDict
from itertools import chain
from typing import Any

import torch
from torch import nn

from .offload import HOOK_ATTRIBUTES, offloaded_values, own_forward
from .stream import placeholder

#: attribute of nbtrace's forward wrappers: what ``module.__dict__["forward"]`` held before (or ``MISSING``)
WRAPPED = "__nbtrace_before__"
MISSING = object()


def mark_wrapper(wrapper: Any, before: Any) -> None:
    """Note on nbtrace's ``wrapper`` what the module's ``forward`` attribute was before it (``MISSING``: none)."""
    setattr(wrapper, WRAPPED, before)


def unwrapped(forward: Any) -> Any:
    """What a module's ``forward`` attribute was before nbtrace wrapped it (``MISSING``: nothing of its own)."""
    while hasattr(forward, WRAPPED):  # a trace inside a trace of the same model wraps twice
        forward = getattr(forward, WRAPPED)
    return forward


def copy_in(module: nn.Module, dtype: torch.dtype, unrounded: dict[int, torch.Tensor] | None = None,
            stream: bool = False) -> nn.Module:
    """A copy of ``module`` whose float parameters, buffers and tensor attributes are in ``dtype`` (see above); an
    offloaded one (``offload.py``) holds its weights itself, on the device its module runs on, and runs without the
    offloading hook. ``unrounded``: ``unrounded_buffers(module)``, where the caller has it already. ``stream``: its
    float parameters are placeholders, made as each module runs (``stream.py``: a float64 twin only)."""
    memo: dict[int, Any] = {"dtype": dtype}
    offloaded = offloaded_values(module)
    unrounded = unrounded_buffers(module) if unrounded is None else unrounded
    for tensor in chain(module.parameters(), module.buffers()):
        if tensor.is_floating_point():
            value, device = offloaded.get(id(tensor), (unrounded.get(id(tensor), tensor), None))
            if stream and isinstance(tensor, nn.Parameter) and type(value) in (torch.Tensor, nn.Parameter) \
                    and value.layout == torch.strided and not value.is_meta:  # a DTensor's piece: copied whole
                memo[id(tensor)] = placeholder(value, device)
                continue
            wide = value.detach().to(dtype, copy=True) if device is None else value.detach().to(device, dtype, copy=True)
            memo[id(tensor)] = nn.Parameter(wide, requires_grad=False) if isinstance(tensor, nn.Parameter) else wide
    return _clone(module, memo)


def unrounded_buffers(module: nn.Module) -> dict[int, torch.Tensor]:
    """``id(buffer) -> the wider value it was rounded from``, for a half-precision buffer (a constant the model keeps
    outside its weights) whose module also holds that value wider: the constant as the model computed it before
    ``model.to(torch.bfloat16)`` rounded the buffer. Found where the module keeps it beside the buffer (a wider tensor
    attribute of its shape; a Python number for a scalar: transformers' ``scalar_embed_scale`` beside
    ``embed_scale``), or can compute it again (transformers' rotary embeddings: ``rope_init_fn(config)``; litgpt's
    ``GPT.rope_cache()``, its ``cos`` and ``sin`` tables), and only
    where it rounds to the buffer exactly. A float64 copy starts from the wider value: the twin sees through a port's
    rounding of its constants, which stays its run's rounding."""
    found: dict[int, torch.Tensor] = {}
    for sub in module.modules():
        narrow = [(name, t) for name, t in sub._buffers.items() if t is not None and t.is_floating_point()
                  and not t.is_meta and t.dtype.itemsize < 4]
        if not narrow:
            continue
        for name, buffer in narrow:
            for candidate in _wider_values(sub, name, buffer):
                if (candidate.shape == buffer.shape and candidate.dtype.itemsize > buffer.dtype.itemsize
                        and _rounds_to(candidate, buffer)):
                    found[id(buffer)] = candidate if candidate.device == buffer.device else candidate.to(buffer.device)
                    break
    return found


def _rounds_to(wide: torch.Tensor, narrow: torch.Tensor) -> bool:
    """True when ``wide`` rounded to ``narrow``'s dtype is ``narrow``, bit for bit (one comparison on the device,
    a few elements: a constant the model keeps, read once per twin)."""
    if wide.device != narrow.device:
        wide = wide.to(narrow.device)
    return torch.equal(wide.to(dtype=narrow.dtype), narrow)


def _wider_values(module: nn.Module, name: str, buffer: torch.Tensor) -> list[torch.Tensor]:
    """What ``module`` holds or computes that may be ``buffer``'s value before it was rounded (see above)."""
    found = [v for v in vars(module).values() if isinstance(v, torch.Tensor) and v.is_floating_point()
             and v is not buffer and not v.is_meta]
    if buffer.dim() == 0:
        found += [torch.tensor(v, dtype=torch.float64) for v in vars(module).values() if type(v) is float]
    recompute = _rope_function(module) if name in ("inv_freq", "original_inv_freq") else None
    if recompute is not None:
        try:
            value = recompute(module.config)
        except Exception:  # noqa: BLE001 - a rope function that takes other arguments: nothing seen through
            value = None
        value = value[0] if isinstance(value, tuple) else value
        if isinstance(value, torch.Tensor):
            found.append(value)
    if name in ("cos", "sin") and callable(getattr(module, "rope_cache", None)):  # litgpt's GPT: (cos, sin) again
        try:
            tables = module.rope_cache(device=buffer.device)
            found.append(tables[("cos", "sin").index(name)])
        except Exception:  # noqa: BLE001 - a method of another meaning: nothing seen through
            pass
    return found


def _rope_function(module: nn.Module) -> Any:
    """The function a transformers rotary embedding computed its frequencies with, from its config (None: none)."""
    if not hasattr(module, "config"):
        return None
    kind = getattr(module, "rope_type", None)
    if kind == "default" and callable(getattr(module, "compute_default_rope_parameters", None)):
        return module.compute_default_rope_parameters
    if callable(getattr(module, "rope_init_fn", None)):
        return module.rope_init_fn
    table = getattr(sys.modules.get("transformers.modeling_rope_utils"), "ROPE_INIT_FUNCTIONS", None)
    return table.get(kind) if isinstance(table, dict) else None


def float64_copy(module: nn.Module) -> nn.Module:
    """``copy_in(module, torch.float64)``."""
    return copy_in(module, torch.float64)


def non_state_constants(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` of every float tensor ``module`` holds outside its ``state_dict``: non-persistent buffers
    and plain tensor attributes (what an implementation computes for itself, such as rotary frequencies)."""
    state = {id(t) for t in module.state_dict(keep_vars=True).values() if isinstance(t, torch.Tensor)}
    found: list[tuple[str, torch.Tensor]] = []
    seen: set[int] = set(state)
    for prefix, sub in module.named_modules():
        held = [(k, t) for k, t in sub._buffers.items() if t is not None]
        held += [(k, v) for k, v in vars(sub).items() if isinstance(v, torch.Tensor)]
        for key, tensor in held:
            if tensor.is_floating_point() and not tensor.is_meta and id(tensor) not in seen:
                seen.add(id(tensor))
                found.append((f"{prefix}.{key}" if prefix else key, tensor))
    return found


def _clone(module: nn.Module, memo: dict[Any, Any]) -> nn.Module:
    if id(module) in memo:
        return memo[id(module)]
    cls = type(module)
    if not _plain(cls):
        _prefill_attributes(module, memo)
        twin = copy.deepcopy(module, memo)
        for sub in twin.modules():
            _unwrap_forward(sub, memo)
        return twin
    twin = cls.__new__(cls)
    memo[id(module)] = twin
    state = {}
    own = own_forward(module)  # under an offloading hook: the module's own forward, the copy holding its weights
    for key, value in module.__dict__.items():
        if key in HOOK_ATTRIBUTES:
            continue
        if key == "forward" and own is not None:
            state[key] = _attribute(own, memo)
        elif key in ("_parameters", "_buffers"):
            state[key] = {name: None if t is None else _tensor(t, memo) for name, t in value.items()}
        elif key == "_modules":
            state[key] = {name: None if m is None else _clone(m, memo) for name, m in value.items()}
        elif key == "forward" and hasattr(value, WRAPPED):
            before = unwrapped(value)
            if before is not MISSING:
                state[key] = _attribute(before, memo)
        else:
            state[key] = _attribute(value, memo)
    twin.__dict__.update(state)
    return twin


def _tensor(tensor: torch.Tensor, memo: dict[Any, Any]) -> torch.Tensor:
    """A tensor of the copy: converted when it is a float tensor, else its own clone (as deepcopy made it)."""
    if id(tensor) not in memo:
        if tensor.is_floating_point():
            memo[id(tensor)] = tensor.detach().to(memo["dtype"], copy=True)
        else:
            memo[id(tensor)] = copy.deepcopy(tensor)
    return memo[id(tensor)]


def _attribute(value: Any, memo: dict[Any, Any]) -> Any:
    if type(value) in _CONTAINERS:  # the most common: a module's hook dicts
        return value.copy()  # an OrderedDict's copy is an OrderedDict
    if isinstance(value, torch.Tensor):
        return _tensor(value, memo)
    if isinstance(value, (dict, list, set)):
        return copy.copy(value)
    if isinstance(value, types.MethodType) and isinstance(value.__self__, nn.Module):
        return types.MethodType(value.__func__, _clone(value.__self__, memo))
    if isinstance(value, _SHARED) or isinstance(value, tuple) and all(isinstance(v, _SHARED) for v in value):
        return value
    if isinstance(value, nn.Module):
        return _clone(value, memo)
    return copy.deepcopy(value, memo)  # any other object (a config, a cache): the copy's own, as deepcopy made it


def _prefill_attributes(module: nn.Module, memo: dict[Any, Any]) -> None:
    """Plain tensor attributes of ``module`` and its submodules converted into ``memo`` before a deepcopy."""
    for sub in module.modules():
        for value in vars(sub).values():
            if isinstance(value, torch.Tensor):
                _tensor(value, memo)


def _unwrap_forward(module: nn.Module, memo: dict[Any, Any]) -> None:
    forward = module.__dict__.get("forward")
    if forward is None or not hasattr(forward, WRAPPED):
        return
    before = unwrapped(forward)
    if before is MISSING:
        del module.__dict__["forward"]
    else:
        module.__dict__["forward"] = copy.deepcopy(before, memo)


_CONTAINERS = frozenset({dict, OrderedDict, list, set})
#: what a copy may share with the original: values nothing can change, and code
_SHARED = (int, float, complex, str, bytes, bool, type(None), enum.Enum, torch.dtype, torch.device, type,
           types.FunctionType, types.BuiltinFunctionType, functools.partial)
_PROTOCOL = ("__deepcopy__", "__copy__", "__getstate__", "__setstate__", "__reduce__", "__reduce_ex__")


@functools.lru_cache(maxsize=None)
def _plain(cls: type) -> bool:
    """True when ``cls`` copies as ``nn.Module`` does (no copy or pickle methods of its own)."""
    return all(getattr(cls, name, None) is getattr(nn.Module, name, None) for name in _PROTOCOL)
