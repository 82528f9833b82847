"""Float64 copies for measuring rounding: a module, a call's inputs, and the exact numerics they run in.

A measurement never touches the user's objects: a module is copied with its float parameters,
buffers and tensor attributes in float64 (no copy in its own dtype first), a call's inputs are
copied (float tensors in float64, other tensors cloned, a KV cache or any other object deep-copied
with its tensors upcast), and the copies run under ``exact_numerics()``: TF32 off, float32 matmuls
in full precision, the math attention backend, autocast off, no autograd, and the CPU and CUDA
random states as they were before, whatever happens.

nbtrace's own forward wrappers (``context.py``) carry what the module's ``forward`` was before
them (``WRAPPED``), so a copy of a wrapped module runs the module's own code, never the recorder.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from itertools import chain
from typing import Any

import torch
from torch import nn

#: attribute of nbtrace's forward wrappers: what ``module.__dict__["forward"]`` held before (or ``MISSING``)
WRAPPED = "__nbtrace_before__"
MISSING = object()
_ATOMIC = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.layout)
_DEPTH = 8  # how deep inside an input object (a KV cache and its layers) tensors are looked for


def mark_wrapper(wrapper: Any, before: Any) -> None:
    """Note on nbtrace's ``wrapper`` what the module's ``forward`` attribute was before it (``MISSING``: none)."""
    setattr(wrapper, WRAPPED, before)


def float64_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module`` whose float parameters, buffers and tensor attributes are float64.

    Devices, the training flag and hooks are kept; nbtrace's wrappers are taken off the copy.
    """
    memo: dict[int, Any] = {}
    for tensor in chain(module.parameters(), module.buffers()):
        if tensor.is_floating_point():
            wide = tensor.detach().to(torch.float64, copy=True)
            memo[id(tensor)] = nn.Parameter(wide, requires_grad=False) if isinstance(tensor, nn.Parameter) else wide
    for sub in module.modules():  # tensors held as plain attributes (a rotary embedding's frequencies, say)
        for value in vars(sub).values():
            if isinstance(value, torch.Tensor) and value.is_floating_point() and id(value) not in memo:
                memo[id(value)] = value.detach().to(torch.float64, copy=True)
    copied = copy.deepcopy(module, memo)
    for sub in copied.modules():
        unwrap_forward(sub, memo)
    return copied


def unwrap_forward(module: nn.Module, memo: dict[int, Any]) -> None:
    """Put back what ``module.forward`` was before nbtrace wrapped it (on a copy: rebound to the copy)."""
    forward = module.__dict__.get("forward")
    if forward is None or not hasattr(forward, WRAPPED):
        return
    while hasattr(forward, WRAPPED):  # a trace inside a trace of the same model wraps twice
        forward = getattr(forward, WRAPPED)
    if forward is MISSING:
        del module.__dict__["forward"]
    else:
        module.__dict__["forward"] = copy.deepcopy(forward, memo)


def upcast(value: Any) -> Any:
    """A copy of a call's inputs for its float64 re-run: float tensors in float64, other tensors cloned,
    lists, tuples and dicts rebuilt, other objects (a KV cache) deep-copied with their tensors upcast.
    Modules inside are shared, not copied."""
    return _up(value, {})


def _up(value: Any, memo: dict[int, Any]) -> Any:
    found = memo.get(id(value), MISSING)
    if found is not MISSING:
        return found
    kind = type(value)
    if isinstance(value, torch.Tensor):
        out: Any = _wide(value)
    elif kind in _ATOMIC or isinstance(value, (nn.Module, type)):
        return value
    elif kind is list:
        out = [_up(item, memo) for item in value]
    elif kind is tuple:
        out = tuple(_up(item, memo) for item in value)
    elif kind is dict:
        out = {key: _up(item, memo) for key, item in value.items()}
    else:
        _prefill(value, memo, _DEPTH)
        out = copy.deepcopy(value, memo)
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


@contextmanager
def exact_numerics() -> Iterator[None]:
    """Run float64 copies exactly: TF32 off (for what a module computes in float32), the math attention
    backend, autocast off, no grad; flags and the CPU and CUDA random states restored whatever happens."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    cpu_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if cuda else None
    flags = _tf32_flags()
    saved = [(owner, name, getattr(owner, name)) for owner, name in flags]
    try:
        with ExitStack() as stack:
            for owner, name in flags:
                setattr(owner, name, "ieee" if name == "fp32_precision" else False)
            stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
            stack.enter_context(torch.autocast("cpu", enabled=False))
            if cuda:
                stack.enter_context(torch.autocast("cuda", enabled=False))
            stack.enter_context(torch.no_grad())
            yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)
        torch.set_rng_state(cpu_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)


def _tf32_flags() -> list[tuple[Any, str]]:
    """The TF32 switches of matmuls and convolutions: torch's ``fp32_precision`` settings where they exist
    (they read and restore in every state, the legacy flags refuse to when both APIs were used)."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    conv = getattr(cudnn, "conv", None)
    if hasattr(matmul, "fp32_precision") and conv is not None and hasattr(conv, "fp32_precision"):
        return [(matmul, "fp32_precision"), (conv, "fp32_precision")]
    return [(matmul, "allow_tf32"), (cudnn, "allow_tf32")]
