"""One module call's gradients: where they are caught, and the slots they are kept in.

The gradient that reaches a call's outputs is caught by a tensor hook on each output (``Tensor.register_hook``:
the sum over every use of that output, and it leaves the tensor object and the user's graph as they were; a hook
registered before an in-place change gets the gradient of the value the module returned). What a call sends to
its inputs is its own contribution, not the sum over every use of the input (a residual path uses it too), so each
float input that requires grad is handed to the module as a view of itself (``x.view_as(x)``, which no module can
tell apart and which autograd supports under every in-place change) and the view's gradient is caught: only the
module's uses reach it. A module that changes its input in place rebases that view: its input gradient is then
not caught (``"None"``). The user's gradients are what they would be without nbtrace up to the order autograd sums
a tensor's contributions in (the view's are summed first: float rounding, docs/backward.md).

A call's gradients are kept per pass in ``CallGrads`` slots, numbered as the walk of its inputs and outputs meets
their tensors, and written as the forward's nesting (``inputs``: ``{"args": [...], "kwargs": {...}}``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

#: a record the Serializer made of a gradient (complete after its ``finish()``)
Record = dict[str, Any]


def differentiable(value: Any) -> bool:
    """A float tensor whose gradient autograd will compute (a parameter is left to the parameters' hooks)."""
    return (
        isinstance(value, torch.Tensor)
        and value.requires_grad
        and value.is_floating_point()
        and not isinstance(value, nn.Parameter)
    )


def detached(value: Any, cache: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """``value`` with every tensor that has a grad_fn replaced by its detached alias, as a ``no_grad`` forward would
    have made it (its printed form has no ``grad_fn=``). One alias per tensor (``cache``, kept for the forward), so
    the Serializer sees one object where the forward passes one on."""
    kind = type(value)
    if kind is torch.Tensor or isinstance(value, torch.Tensor):
        if value.grad_fn is None:
            return value
        hit = cache.get(id(value))
        if hit is None or hit[0] is not value:
            hit = cache[id(value)] = (value, value.detach())
        return hit[1]
    if kind is tuple or kind is list:
        return kind(detached(item, cache) for item in value)
    if kind is dict:
        return {key: detached(item, cache) for key, item in value.items()}
    if isinstance(value, dict) and hasattr(value, "to_tuple"):  # a transformers ModelOutput: keep its repr's keys
        return {key: detached(item, cache) for key, item in value.items()}
    return value


class CallGrads:
    """The gradient slots of one call: its inputs' views and outputs, as places, and what each pass caught."""

    __slots__ = ("name", "forward", "inputs", "outputs", "active", "caught", "norms_only")

    def __init__(self, name: str, forward: int) -> None:
        self.name = name  # the call's file base name: its path, ``<path>@<n>`` for a later call
        self.forward = forward  # the index of its forward in the block
        self.inputs: Any = None  # the inputs' nesting with slot numbers in place of the watched tensors
        self.outputs: Any = None
        self.active = True  # False once pruning left the call out of the forward's files
        self.caught: dict[tuple[str, int], Record] = {}  # (io, slot) -> record, for the pass running now
        #: a layer block pruning left out: only its gradients' norms are kept (the picture across layers)
        self.norms_only = False

    def structure(self, io: str) -> Any:
        """The gradients caught in this pass, in the call's nesting (``None`` where none flowed)."""
        template = self.inputs if io == "inputs" else self.outputs
        return _fill(template, io, self.caught)


def _fill(template: Any, io: str, caught: dict[tuple[str, int], Record]) -> Any:
    if isinstance(template, _Slot):
        return caught.get((io, template.number), "None")
    if isinstance(template, list):
        return [_fill(item, io, caught) for item in template]
    if isinstance(template, dict):
        return {key: _fill(item, io, caught) for key, item in template.items()}
    return "None"


class _Slot:
    __slots__ = ("number",)

    def __init__(self, number: int) -> None:
        self.number = number


def alias_inputs(args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any], list[torch.Tensor], Any]:
    """The call's arguments with each differentiable tensor (top level, or one level inside a tuple or list)
    replaced by a view of itself; the views in slot order; the inputs' nesting with slots (``{"args": ..}``)."""
    views: list[torch.Tensor] = []

    def one(value: Any, depth: int) -> tuple[Any, Any]:
        if differentiable(value):
            view = value.view_as(value)
            views.append(view)
            return view, _Slot(len(views) - 1)
        if depth == 0 and type(value) in (tuple, list):
            pairs = [one(item, 1) for item in value]
            return type(value)(p[0] for p in pairs), [p[1] for p in pairs]
        return value, None

    new_args, arg_slots = [], []
    for item in args:
        new, slot = one(item, 0)
        new_args.append(new)
        arg_slots.append(slot)
    new_kwargs, kwarg_slots = {}, {}
    for key, item in kwargs.items():
        new_kwargs[key], kwarg_slots[key] = one(item, 0)
    template: dict[str, Any] = {}
    if args:
        template["args"] = arg_slots
    if kwargs:
        template["kwargs"] = kwarg_slots
    return tuple(new_args), new_kwargs, views, template


def output_slots(out: Any) -> tuple[list[torch.Tensor], Any]:
    """The differentiable tensors of a call's output (walked as the format walks it) and its nesting with slots."""
    tensors: list[torch.Tensor] = []

    def walk(value: Any, depth: int) -> Any:
        if differentiable(value):
            tensors.append(value)
            return _Slot(len(tensors) - 1)
        if depth > 4:
            return None
        if type(value) in (tuple, list):
            return [walk(item, depth + 1) for item in value]
        if isinstance(value, dict):
            return {key: walk(item, depth + 1) for key, item in value.items()}
        return None

    template = walk(out, 0)
    return tensors, template


def hook_all(
    tensors: list[torch.Tensor], io: str, grads: CallGrads, catch: Callable[[CallGrads, str, int, torch.Tensor], None],
    handles: list[Any],
) -> None:
    """Register a hook on each tensor that hands its gradient to ``catch`` (with the call, ``io`` and its slot)."""
    for number, tensor in enumerate(tensors):
        def hook(grad: torch.Tensor, number: int = number) -> None:
            catch(grads, io, number, grad)

        handles.append(tensor.register_hook(hook))
