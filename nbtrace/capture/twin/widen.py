"""Keeping a float64 run in float64 through the module's own casts.

A float64 copy of a module is only as precise as its lowest cast: ``x.float()`` in an RMSNorm, a split-K
matmul summing ``.to(torch.float32)`` partials, ``softmax(..., dtype=torch.float32)`` or rotary frequencies
made with ``torch.arange(...).float()`` turn the float64 run into a float32 one at that step, and a rounding
measured against it reads as zero. ``Widen`` is a ``TorchFunctionMode`` that, while it is on, asks every
operation for float64 wherever the code asks for another floating dtype (a ``dtype=`` argument, a dtype passed
by position, ``.float()``, ``.half()``, ``.bfloat16()``; complex dtypes become complex128) and notes every
operation that still returns a floating tensor narrower than float64 (a kernel that has no float64 form, a
reinterpreting ``view``): those are where the twin is not float64, and ``low`` says which.

Bit reinterpretations (``Tensor.view(dtype)``) keep their dtype: widening them would change their meaning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_TENSOR = torch.Tensor
#: methods that only convert to a floating dtype: in the twin they convert to float64
_CASTS = frozenset({_TENSOR.float, _TENSOR.half, _TENSOR.bfloat16})
CAST_NAMES = frozenset({"float", "half", "bfloat16", "double"})
#: operations whose dtype argument reinterprets bits: never widened
_KEEP = frozenset({_TENSOR.view})
_WIDE = {True: torch.complex128, False: torch.float64}
_DTYPE = frozenset({torch.dtype})
#: the floating dtypes narrower than float64: an operation that returns one is where the twin is not float64
_NARROW = frozenset(d for d in vars(torch).values() if isinstance(d, torch.dtype) and d.is_floating_point
                    and d != torch.float64)


def wide_dtype(value: Any) -> Any:
    """A floating torch dtype as float64 (a complex one as complex128); anything else as it is."""
    if isinstance(value, torch.dtype) and (value.is_floating_point or value.is_complex):
        return _WIDE[value.is_complex]
    return value


class Widen(TorchFunctionMode):
    """While on, floating dtypes the code asks for become float64; ``low`` collects what stayed narrower."""

    def __init__(self) -> None:
        super().__init__()
        #: (operation name, dtype name) of operations that returned a floating tensor narrower than float64
        self.low: list[tuple[str, str]] = []
        #: a streamed twin's (``stream.py``): an operation's arguments with its placeholders made for it
        self.resolve: Callable[[tuple, dict[str, Any]], tuple[tuple, dict[str, Any]]] | None = None

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if self.resolve is not None:
            args, kwargs = self.resolve(args, kwargs)
        if func in _CASTS:
            func = _TENSOR.double
        elif func not in _KEEP:  # the checks run in C: this is every operation of the twin
            if not _DTYPE.isdisjoint(map(type, args)):
                args = tuple(wide_dtype(a) for a in args)
            if "dtype" in kwargs:
                kwargs = dict(kwargs, dtype=wide_dtype(kwargs["dtype"]))
        out = func(*args, **kwargs)
        if type(out) is _TENSOR and out.dtype in _NARROW:
            self.low.append((getattr(func, "__name__", repr(func)), str(out.dtype).replace("torch.", "")))
        return out
