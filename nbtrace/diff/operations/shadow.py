"""Running a function's operations twice at once: as written, and in float64 beside it (the shadow).

Every torch operation of a run is executed as the code asks, then again on the float64 shadows of its
tensor arguments (the float64 run of the same code, the measured ground truth), and once more on its own
arguments upcast to float64 (the same operation without its rounding). Tensors no operation made
(parameters, buffers, inputs, constants) are their own shadow, upcast. Floating dtypes an operation
asks for (``softmax(dtype=torch.float32)``, ``.to(torch.bfloat16)``, ``.half()``) become float64 in both
float64 executions, so the shadow never rounds (the same widening as the float64 twin's, ``capture/twin/widen.py``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map

from ...capture.twin.widen import CAST_NAMES, wide_dtype

#: operations whose result is random: the shadow takes the value the run drew instead of drawing again
SENTINEL = 1e30  # a value this large is a mask's fill in any dtype
_RANDOM = ("rand", "dropout", "bernoulli", "multinomial", "normal_", "uniform_", "exponential_")


def op_name(func: Callable[..., Any]) -> str:
    """A readable name: ``linear``, ``Tensor.softmax``, ``Tensor.__getitem__``."""
    name = getattr(func, "__name__", None) or repr(func)
    if name == "__get__":  # a property of Tensor (``.T``, ``.mT``)
        owner = getattr(func, "__self__", None)
        name = getattr(owner, "__name__", "property")
    qual = getattr(func, "__qualname__", "") or ""
    return f"Tensor.{name}" if qual.startswith(("TensorBase.", "Tensor.")) or "_TensorBase" in qual else name


def is_random(name: str) -> bool:
    """Whether an operation draws random numbers."""
    return any(part in name for part in _RANDOM)


def upcast(value: Any) -> Any:
    """A floating tensor as float64 (a copy); other values as they are."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().to(torch.float64)
    return wide_dtype(value)


class Shadows:
    """The float64 shadow of each tensor a run has seen, found by identity (weak, so ids are never confused)."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[weakref.ref, torch.Tensor]] = {}

    def get(self, tensor: torch.Tensor) -> torch.Tensor:
        """The shadow of ``tensor`` (itself upcast when no operation made it)."""
        entry = self._known.get(id(tensor))
        if entry is not None and entry[0]() is tensor:
            return entry[1]
        wide = upcast(tensor)
        self.set(tensor, wide)
        return wide

    def set(self, tensor: torch.Tensor, shadow: torch.Tensor) -> None:
        """Remember ``shadow`` as the float64 twin of ``tensor``."""
        try:
            self._known[id(tensor)] = (weakref.ref(tensor), shadow)
        except TypeError:  # pragma: no cover - a tensor subclass without weak references
            pass

    def map(self, value: Any) -> Any:
        """``value`` with each tensor replaced by its shadow and each floating dtype by float64."""
        return tree_map(lambda x: self.get(x) if isinstance(x, torch.Tensor) else wide_dtype(x), value)


def wide_func(func: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The function to run in float64: a pure cast (``.half()``) becomes ``.double()``."""
    if name.startswith("Tensor.") and name[7:] in CAST_NAMES:
        return torch.Tensor.double
    return func


def sentinel_limit(dtype: torch.dtype) -> float:
    """Values of ``dtype`` at least this large are sentinels (a mask's ``finfo.min``), not results."""
    return min(SENTINEL, torch.finfo(dtype).max / 2) if dtype.is_floating_point else SENTINEL


def twin(result: Any, wide: Any, shadows: Shadows) -> None:
    """Pair each tensor of ``result`` with the tensor at the same place in ``wide`` (its shadow). A sentinel of
    the run (a value at the edge of its dtype's range: ``finfo(float16).min`` filling a mask) keeps its value in
    the shadow: ``score + finfo.min`` is the fill in the run's dtype, and so in float64."""
    low, high = _leaves(result), _leaves(wide)
    if len(low) != len(high):
        return
    for a, b in zip(low, high):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            if a.is_floating_point() and a.dtype != torch.float64 and b.dtype == torch.float64 and a.shape == b.shape:
                edge = a.abs() >= sentinel_limit(a.dtype)
                if bool(edge.any()):
                    b = torch.where(edge, a.detach().to(torch.float64), b)
            shadows.set(a, b)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def tensors_of(value: Any) -> list[torch.Tensor]:
    """Every tensor inside ``value`` (nested lists, tuples and dicts), in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for item in value.values() for t in tensors_of(item)]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_of(item)]
    if hasattr(value, "to_tuple"):  # a transformers ModelOutput
        return tensors_of(value.to_tuple())
    return []
