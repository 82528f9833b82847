"""Running a live module where it lives, and its float64 ground truth.

- ``device_of``: the device of a module's first parameter or buffer (the CPU without any);
- ``to_device``: recorded inputs moved there (nested tuples, lists, dicts; dtypes unchanged);
- ``copy_in`` / ``cast``: the module copied to float64 or float32 (float parameters and buffers), float inputs
  cast to it, on the module's own device;
- ``exact_numerics``: while a float64 truth is computed, TF32 is off and scaled-dot-product attention
  takes the math backend; every flag is restored afterwards, also when the module raises.
"""

from __future__ import annotations

import contextlib
import copy
import enum
import functools
import types
from collections import OrderedDict
from collections.abc import Iterator
from itertools import chain
from typing import Any

import torch
from torch import nn


def device_of(module: nn.Module) -> torch.device:
    """Where ``module`` computes: its first parameter's or buffer's device (the CPU when it holds none)."""
    for tensor in chain(module.parameters(), module.buffers()):
        return tensor.device
    return torch.device("cpu")


def to_device(value: Any, device: torch.device) -> Any:
    """``value`` with every tensor in it moved to ``device`` (dtypes unchanged; nothing copied when already there)."""
    if isinstance(value, torch.Tensor):
        return value if value.device == device else value.to(device)
    if isinstance(value, tuple):
        return tuple(to_device(v, device) for v in value)
    if isinstance(value, list):
        return [to_device(v, device) for v in value]
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


def cast(value: Any, dtype: torch.dtype) -> Any:
    """``value`` with every float tensor in it converted to ``dtype`` (other values as they are)."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, tuple):
        return tuple(cast(v, dtype) for v in value)
    if isinstance(value, list):
        return [cast(v, dtype) for v in value]
    if isinstance(value, dict):
        return {k: cast(v, dtype) for k, v in value.items()}
    return value


def copy_in(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """A copy of ``module`` with its float parameters and buffers in ``dtype`` (no copy in its own dtype first).

    Built module by module rather than by ``copy.deepcopy`` (ten times its speed on a layer block): each module
    a new object of its class whose parameters, buffers and submodules are the copies (tied ones stay tied);
    other tensors in its attributes are cloned, dicts, lists and sets copied one level deep (what its
    forward adds to them stays in the copy), methods bound to a module rebound to its copy; numbers, strings,
    dtypes, devices, functions and classes shared, any other object (a config, a cache) deep-copied as
    ``deepcopy`` would. A class with its own copy or pickle protocol is deep-copied as before."""
    memo: dict[int, Any] = {}
    for tensor in chain(module.parameters(), module.buffers()):
        if tensor.is_floating_point():
            wide = tensor.detach().to(dtype)
            memo[id(tensor)] = nn.Parameter(wide, requires_grad=False) if isinstance(tensor, nn.Parameter) else wide
    return _clone(module, memo)


def _clone(module: nn.Module, memo: dict[int, Any]) -> nn.Module:
    if id(module) in memo:
        return memo[id(module)]
    cls = type(module)
    if not _plain(cls):
        return copy.deepcopy(module, memo)
    twin = cls.__new__(cls)
    memo[id(module)] = twin
    state = {}
    for key, value in module.__dict__.items():
        if key in ("_parameters", "_buffers"):
            state[key] = {name: None if t is None else _tensor(t, memo) for name, t in value.items()}
        elif key == "_modules":
            state[key] = {name: None if m is None else _clone(m, memo) for name, m in value.items()}
        else:
            state[key] = _attribute(value, memo)
    twin.__dict__.update(state)
    return twin


def _tensor(tensor: torch.Tensor, memo: dict[int, Any]) -> torch.Tensor:
    if id(tensor) not in memo:
        memo[id(tensor)] = copy.deepcopy(tensor)  # not converted (an integer buffer): its own copy, as deepcopy made
    return memo[id(tensor)]


def _attribute(value: Any, memo: dict[int, Any]) -> Any:
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


_CONTAINERS = frozenset({dict, OrderedDict, list, set})
#: what a copy may share with the original: values nothing can change, and code
_SHARED = (int, float, complex, str, bytes, bool, type(None), enum.Enum, torch.dtype, torch.device, type,
           types.FunctionType, types.BuiltinFunctionType, functools.partial)
_PROTOCOL = ("__deepcopy__", "__copy__", "__getstate__", "__setstate__", "__reduce__", "__reduce_ex__")


@functools.lru_cache(maxsize=None)
def _plain(cls: type) -> bool:
    """True when ``cls`` copies as ``nn.Module`` does (no copy or pickle methods of its own)."""
    return all(getattr(cls, name, None) is getattr(nn.Module, name, None) for name in _PROTOCOL)


@contextlib.contextmanager
def exact_numerics() -> Iterator[None]:
    """TF32 off (float32 matmul precision "highest", cuDNN's TF32 flag off) and the math attention backend while
    the block runs; every flag restored afterwards, also when the block raises. Where a program mixed torch's
    legacy and new TF32 settings (torch then refuses to report the precision), the legacy flag is saved instead.
    Autocast is off inside (``_no_autocast``)."""
    try:
        precision: str | None = torch.get_float32_matmul_precision()
    except RuntimeError:
        precision = None
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        if precision is not None:
            torch.set_float32_matmul_precision("highest")
        else:
            torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        with _math_attention(), _no_autocast():
            yield
    finally:
        if precision is not None:
            torch.set_float32_matmul_precision(precision)
        else:
            torch.backends.cuda.matmul.allow_tf32 = matmul
        torch.backends.cudnn.allow_tf32 = cudnn


def _no_autocast() -> contextlib.ExitStack:
    """Autocast off on the CPU and CUDA (a replay inside a port's autocast must not round its float64 run)."""
    stack = contextlib.ExitStack()
    for device in ("cpu", "cuda"):
        try:
            stack.enter_context(torch.autocast(device, enabled=False))
        except RuntimeError:  # pragma: no cover  (a build without that device type)
            continue
    return stack


def _math_attention() -> contextlib.AbstractContextManager[None]:
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # pragma: no cover  (an older torch: its sdpa picks math for float64 anyway)
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.MATH])
