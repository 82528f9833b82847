"""The float64 twin of a forward and its backward, fingerprinted at every call: the backward's ground truth.

Two implementations' backward passes differ by rounding wherever they are correct, and by more where one is not.
As the forward's twin does (``capture/twin/``), the whole model is copied to float64 and run again from the same
top-level inputs, in exact numerics and float64 through its own casts, with the random state the run's forward
began with (a dropout draws the same masks; a checkpoint that recomputes with other random numbers does so in the
twin too). Then the twin runs its backward from a fixed cotangent at its outputs: standard normal numbers from a
seeded generator, the same on every side and machine for outputs of the same shapes. The gradients do not depend
on the loss the user computed (that one is compared from the run's own gradient at the model's output): they are
each call's vector-Jacobian product, the function a backward computes. At every call the gradient that reached its
outputs (``outputs.<i>``) and what it sent to its inputs (``inputs.<i>``, its own contribution, caught as the
run's are: ``calls.py``) are fingerprinted (``twin/fingerprint.py``), and so is each parameter's gradient, under
its module's first call (``param.<name>``). Calls pruning leaves out of the files are kept: the twin names calls
by their path and count (``<path>@<n>``), as the recorder does, and ``order`` lists them in the order they began.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch
from torch import nn

from ..twin.copies import copy_in
from ..twin.fingerprint import fingerprint
from ..twin.numerics import float64_twin
from ..twin.widen import Widen
from ..twin.signs import KEPT, LEFT_OUT, SUMS, SUMSQ
from ..twin.values import upcast
from .calls import alias_inputs, output_slots

_LAYOUT = "layout" in inspect.signature(fingerprint).parameters
#: the seed of the cotangent the twin's backward starts from
COTANGENT_SEED = 20250601


def in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1


def cotangent(shape: torch.Size, device: torch.device) -> torch.Tensor:
    """The fixed float64 cotangent of an output of ``shape`` (the same on every side)."""
    generator = torch.Generator().manual_seed(COTANGENT_SEED + math.prod(shape))
    return torch.randn(shape, generator=generator, dtype=torch.float64).to(device)


def random_state() -> tuple[torch.Tensor, list[torch.Tensor] | None]:
    """The CPU and CUDA random states, to run the twin with the numbers the run's forward drew."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    return torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else None


class _Prints:
    """The fingerprints of the twin's gradients, on their device until ``section``."""

    def __init__(self) -> None:
        self.numbers: list[tuple[str, str, tuple[int, ...], torch.Tensor]] = []

    def put(self, name: str, place: str, grad: torch.Tensor) -> None:
        if grad is not None and grad.is_floating_point():
            if grad.layout != torch.strided:  # a sparse embedding's gradient: fingerprinted as the tensor it stands for
                grad = grad.to_dense()
            numbers = fingerprint(grad, None, False) if _LAYOUT else fingerprint(grad)  # the flat-order sums only
            self.numbers.append((name, place, tuple(grad.shape), numbers))

    def section(self, order: list[str]) -> dict[str, Any]:
        from ...core.twin import TwinPrint

        calls: dict[str, dict[str, Any]] = {}
        if self.numbers:
            host = torch.stack([n[3][: LEFT_OUT + 1].cpu() for n in self.numbers]).tolist()
            for (name, place, shape, _), values in zip(self.numbers, host):
                kept, squares, left_out = values[KEPT], values[SUMSQ], values[LEFT_OUT]
                rms = math.sqrt(squares / kept) if kept > 0 else 0.0
                print_ = TwinPrint(shape, tuple(values[:SUMS]), int(kept), rms, int(left_out))
                calls.setdefault(name, {})[place] = print_.to_dict()
        return {"seed": COTANGENT_SEED, "order": order, "calls": calls}


def twin_backward(model: nn.Module, class_name: str, args: tuple, kwargs: dict[str, Any],
                  state: tuple[torch.Tensor, list[torch.Tensor] | None]) -> dict[str, Any]:
    """Run ``model``'s float64 twin forward and backward on float64 copies of ``args``/``kwargs`` from the random
    ``state``; returns the section the backward file keeps (``twin``)."""
    copy = copy_in(model, torch.float64)
    wanted = {name for name, p in model.named_parameters() if p.requires_grad}
    for name, parameter in copy.named_parameters():
        parameter.requires_grad_(name in wanted)
    prints = _Prints()
    order: list[str] = []
    counts: dict[str, int] = {}
    first: dict[str, str] = {}  # module path -> its first call's name
    waiting: dict[str, list[str]] = {}  # module path -> calls run under no_grad, waiting for their recomputation
    for name, module in copy.named_modules():
        path = f"{class_name}.{name}" if name else class_name
        module.forward = _hooked(module.forward, path, counts, order, first, prints, waiting)
    wide_args, wide_kwargs = upcast((args, kwargs))
    with float64_twin():
        torch.set_rng_state(state[0])
        if state[1] is not None:
            torch.cuda.set_rng_state_all(state[1])
        with torch.enable_grad():
            out = copy(*wide_args, **wide_kwargs)
            tensors, _ = output_slots(out)
            if tensors:
                torch.autograd.backward(tensors, [cotangent(t.shape, t.device) for t in tensors])
    for name, parameter in copy.named_parameters():  # a tied weight once, under its first name (its gradient sums
        module, _, short = name.rpartition(".")         # every use: it belongs to no one use's call)
        call = first.get(f"{class_name}.{module}" if module else class_name)
        if call is not None and parameter.grad is not None:
            prints.put(call, f"param.{short}", parameter.grad)
    return prints.section(order)


def _hooked(forward: Any, path: str, counts: dict[str, int], order: list[str], first: dict[str, str],
            prints: _Prints, waiting: dict[str, list[str]]) -> Any:
    def hooked(*args: Any, **kwargs: Any) -> Any:
        if in_backward():  # a checkpoint recomputing, float64 through its casts: hooked only where its first run
            queue = waiting.get(path)  # was under no_grad (a reentrant checkpoint), as the capture does
            with Widen():
                if not queue or not torch.is_grad_enabled():
                    return forward(*args, **kwargs)
                return _watched(forward, queue.pop(0), prints, args, kwargs)
        count = counts[path] = counts.get(path, 0) + 1
        name = path if count == 1 else f"{path}@{count}"
        first.setdefault(path, name)
        order.append(name)
        if not torch.is_grad_enabled():
            waiting.setdefault(path, []).append(name)
            return forward(*args, **kwargs)
        return _watched(forward, name, prints, args, kwargs)

    return hooked


def _watched(forward: Any, name: str, prints: _Prints, args: tuple, kwargs: dict[str, Any]) -> Any:
    args, kwargs, views, _ = alias_inputs(args, kwargs)
    out = forward(*args, **kwargs)
    tensors, _ = output_slots(out)
    for io, watched in (("inputs", views), ("outputs", tensors)):
        for i, tensor in enumerate(watched):
            tensor.register_hook(lambda grad, place=f"{io}.{i}": prints.put(name, place, grad))
    return out
