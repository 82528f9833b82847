"""Operation records of one module call: every torch operation its forward ran, with its source line,
the child module it ran in, its data flow, its output, and that output in the float64 run of the same code.

``record_operations(module, args, kwargs)`` re-runs ``module`` under a ``TorchFunctionMode`` (``shadow.py``
runs each operation in float64 beside it). Forward hooks on the module and its children (to know which child
an operation runs in) are installed for the run only; the mode and the hooks are gone after it returns or
raises, and the module's buffers and torch's random state are what they were before.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from .shadow import Shadows, is_random, op_name, tensors_of, twin, upcast, wide_func
from .source import SourceLine, caller_line

#: what an operation's output is, in plain numbers: mean, std, min, max (of its finite values)
SUMMARY = ("mean", "std", "min", "max")
_QUERIES = {"size", "dim", "numel", "stride", "is_floating_point", "is_contiguous", "data_ptr", "item", "tolist",
            "__len__", "__bool__", "__format__", "__repr__", "element_size", "is_complex", "storage_offset",
            "__iter__"}
_INPLACE_DUNDERS = {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__"}


@dataclass
class Operation:
    """One torch operation of a recorded call (one per tensor it returned: ``split[1]``)."""

    index: int
    name: str
    module: str  # the child module it ran in, relative to the recorded one ("" for the module's own code)
    source: SourceLine
    arg_shapes: list[tuple[int, ...]]
    arg_dtypes: list[str]
    shape: tuple[int, ...]
    dtype: str
    inputs: list[int]  # the operations whose outputs it read (data flow)
    low: torch.Tensor | None  # its output as run
    truth: torch.Tensor | None  # its output in the float64 run of the same code
    own: float | None = None  # relative RMS: low output against the operation on its own inputs in float64
    error: float | None = None  # relative RMS: low output against the float64 run's
    reaches_output: bool = False  # the module's output depends on it
    stats: dict[str, float] | None = None  # its summary, kept when the tensors are released

    @property
    def floating(self) -> bool:
        """Whether its output holds floating values (those are compared)."""
        kind = getattr(torch, self.dtype, None)
        return isinstance(kind, torch.dtype) and kind.is_floating_point

    def release(self) -> None:
        """Keep the summary of its output, drop the tensors (``narrow(..., full=True)`` keeps them)."""
        self.stats = self.summary()
        self.low = self.truth = None

    def summary(self) -> dict[str, float]:
        """Mean, std, min and max of its output's finite values."""
        if self.low is None:
            return dict(self.stats or {})
        if self.low.numel() == 0 or not self.low.is_floating_point():
            return {}
        x = self.low.detach().double()
        x = x[torch.isfinite(x)]
        if x.numel() == 0:
            return {}
        std = float(x.std()) if x.numel() > 1 else 0.0
        return {"mean": float(x.mean()), "std": std, "min": float(x.min()), "max": float(x.max())}


@dataclass
class OperationRecord:
    """The operations of one call of ``module_name`` run in ``dtype``, in the order they ran."""

    module_name: str
    dtype: str
    operations: list[Operation] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    #: operations float64 could not run (their float64 twin is their own output upcast): "name at file:line"
    without_twin: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.operations)


def relative_rms(x: torch.Tensor, reference: torch.Tensor) -> float:
    """RMS of ``x - reference`` over their finite elements, relative to the RMS of ``reference`` (absolute
    where that is 0); ``reference`` is brought to ``x``'s device (a reference on the CPU, a port on a GPU)."""
    a, b = x.detach().double().reshape(-1), reference.detach().to(x.device, torch.float64).reshape(-1)
    keep = torch.isfinite(a) & torch.isfinite(b)
    if not bool(keep.all()):
        if not bool(keep.any()):
            return 0.0
        a, b = a[keep], b[keep]
    scale = float(torch.linalg.vector_norm(b))
    diff = float(torch.linalg.vector_norm(a - b))
    return diff / scale if scale > 0 else diff / max(1, a.numel()) ** 0.5


class _Recorder(TorchFunctionMode):
    def __init__(self, record: OperationRecord, stack: list[str], boundary: FrameType | None = None) -> None:
        super().__init__()
        self.record, self.stack, self.shadows = record, stack, Shadows()
        self.boundary = boundary  # the frame that runs the recorded module: source lines are found below it
        self._made: dict[int, tuple[weakref.ref, int]] = {}
        self.rng: torch.Tensor | None = None

    def producer(self, tensor: torch.Tensor) -> int | None:
        entry = self._made.get(id(tensor))
        return entry[1] if entry is not None and entry[0]() is tensor else None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = op_name(func)
        self.rng = torch.random.get_rng_state() if is_random(name) else None
        result = func(*args, **kwargs)
        if name.split(".")[-1] in _QUERIES:
            return result
        inplace = name in _INPLACE_DUNDERS or (name.endswith("_") and not name.endswith("__"))
        outputs = tensors_of(result)
        if not outputs and not inplace:
            return result
        try:
            self._shadow(func, name, args, kwargs, result, inplace)
        except (RuntimeError, TypeError, ValueError, NotImplementedError):
            for t in tensors_of(result):  # float64 cannot run it: its twin is its own output, and it is listed
                self.shadows.set(t, upcast(t))
            self.record.without_twin.append(f"{name} at {caller_line(self.boundary).short}")
        self._note(func, name, args, kwargs, result, inplace)
        return result

    def _shadow(self, func, name, args, kwargs, result, inplace):
        target = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if inplace and (target is None or not target.is_floating_point()):
            for t in tensors_of(result):  # an integer written in place is its own shadow
                self.shadows.set(t, upcast(t) if t.is_floating_point() else t)
            return
        wide = self._again(wide_func(func, name), self.shadows.map(args), self.shadows.map(kwargs))
        if inplace and target is not None and not tensors_of(result):
            result, wide = target, self.shadows.get(target)
        twin(result, wide, self.shadows)

    def _again(self, func, args, kwargs):
        """Run ``func`` once more; a random operation draws the same numbers as the run did."""
        if self.rng is None:
            return func(*args, **kwargs)
        after = torch.random.get_rng_state()
        torch.random.set_rng_state(self.rng)
        try:
            return func(*args, **kwargs)
        finally:
            torch.random.set_rng_state(after)

    def _note(self, func, name, args, kwargs, result, inplace):
        given = tensors_of(args) + tensors_of(kwargs)
        outs = tensors_of(result) or ([args[0]] if inplace and args else [])
        source = caller_line(self.boundary)
        inputs = sorted({i for t in given if (i := self.producer(t)) is not None})
        own = self._own(func, name, args, kwargs, inplace, outs)
        for n, out in enumerate(outs):
            index = len(self.record.operations)
            truth = self.shadows.get(out) if out.is_floating_point() else None
            low = out.detach().clone()
            op = Operation(
                index=index, name=f"{name}[{n}]" if len(outs) > 1 else name,
                module=self.stack[-1] if self.stack else "", source=source,
                arg_shapes=[tuple(t.shape) for t in given], arg_dtypes=[str(t.dtype)[6:] for t in given],
                shape=tuple(out.shape), dtype=str(out.dtype)[6:], inputs=inputs, low=low,
                truth=truth.detach().clone() if truth is not None else None,
            )
            if truth is not None and out.numel():
                op.error = relative_rms(low, truth)
                if own is not None and n < len(own) and own[n].shape == out.shape:
                    op.own = relative_rms(low, own[n])
            self.record.operations.append(op)
            try:
                self._made[id(out)] = (weakref.ref(out), index)
            except TypeError:  # pragma: no cover
                pass

    def _own(self, func, name, args, kwargs, inplace, outs):
        """The operation run in float64 on its own arguments upcast (not for in-place or random ones)."""
        if inplace or not any(t.is_floating_point() for t in outs):
            return None
        try:
            wide = self._again(wide_func(func, name), _upcast_all(args), _upcast_all(kwargs))
        except (RuntimeError, TypeError):  # an operation float64 cannot run: its own rounding stays unknown
            return None
        return tensors_of(wide)


def _upcast_all(value: Any) -> Any:
    from torch.utils._pytree import tree_map

    return tree_map(upcast, value)


def module_dtype(module: nn.Module, args: tuple, kwargs: dict) -> torch.dtype:
    """The floating dtype the call computes in: its first floating parameter's, else its first floating input's."""
    for tensor in list(module.parameters()) + list(module.buffers()) + tensors_of((args, kwargs)):
        if tensor.is_floating_point():
            return tensor.dtype
    return torch.float32


def record_operations(module: nn.Module, args: tuple = (), kwargs: dict | None = None) -> OperationRecord:
    """Run ``module(*args, **kwargs)`` once (no grad) and record every torch operation it runs, each beside
    its float64 twin. The module's buffers and torch's random state are restored afterwards."""
    kwargs = dict(kwargs or {})
    if not isinstance(module, nn.Module):
        raise TypeError(f"record_operations: module must be a torch.nn.Module, got {type(module).__name__}")
    record = OperationRecord(type(module).__name__, str(module_dtype(module, args, kwargs))[6:])
    stack: list[str] = []
    names = {id(m): name for name, m in module.named_modules()}
    handles = []
    buffers = [(b, b.detach().clone()) for b in module.buffers()]
    rng = torch.random.get_rng_state()
    try:
        def enter(child: nn.Module, _args: Any) -> None:
            stack.append(names.get(id(child), ""))

        def leave(_child: nn.Module, _args: Any, _output: Any) -> None:
            if stack:
                stack.pop()

        for child in module.modules():
            handles.append(child.register_forward_pre_hook(enter))
            handles.append(child.register_forward_hook(leave, always_call=True))
        recorder = _Recorder(record, stack, sys._getframe())
        with torch.no_grad(), recorder:
            result = module(*args, **kwargs)
        record.outputs = [i for t in tensors_of(result) if (i := recorder.producer(t)) is not None]
    finally:
        for handle in handles:
            handle.remove()
        with torch.no_grad():
            for buffer, saved in buffers:
                if buffer.shape == saved.shape:
                    buffer.copy_(saved)
        torch.random.set_rng_state(rng)
    _mark_reaching(record)
    return record


def _mark_reaching(record: OperationRecord) -> None:
    """Mark the operations the module's output depends on (walking the data flow back from the outputs)."""
    todo = list(record.outputs)
    ops = record.operations
    while todo:
        op = ops[todo.pop()]
        if op.reaches_output:
            continue
        op.reaches_output = True
        todo.extend(op.inputs)


