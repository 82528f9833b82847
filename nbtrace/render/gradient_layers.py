"""Gradient norms across layers, computed apart from any drawing: what the TraceView's gradient plot and the saved
HTML file show (the picture of vanishing and exploding gradients people draw by hand).

``layer_gradients(trace)`` gives, for each layer block the files hold (``core/paths.is_layer_block_call``), in
forward order: the norm of the gradient that reached its outputs in a backward pass (``arrived``), the norm of what
it sent on to its inputs (``sent``: a layer with a residual sends on about what it got; one whose residual is cut by
a ``detach()`` sends much less, the vanishing drop), the norm of every parameter gradient under it, and the RMS of
the hidden state entering it in the forward. ``x`` places the layer on one axis: its layer number, the stacks of a
model with several (an encoder's, a decoder's) one after the other, one step apart (no line joins two stacks). A layer block pruning left out of the files
comes from the norms the backward file keeps of it (``GradPass.norms``; ``node`` None, no forward numbers). A model with no layer stack gets its leaf calls that own parameters, in call order (``x``
their position).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.paths import is_layer_block_call, layer_number
from .backward_frame import _first_tensor, rms_of

if TYPE_CHECKING:  # pragma: no cover
    from ..core.gradients import GradPass
    from ..core.node import Node
    from ..core.tensor import TensorValue
    from ..core.trace import Trace

__all__ = ["LayerGradient", "layer_gradients", "norm_of"]


@dataclass(frozen=True)
class LayerGradient:
    """One layer's gradients in one backward pass (norms are Euclidean norms over the whole tensor)."""

    path: str  #: the layer's module path
    node: Node | None  #: its call in the forward trace (None for a layer pruning left out of the files)
    x: float  #: its place on the layer axis
    layer: int | None  #: its layer number (None for a leaf call of a model without layer stacks)
    stack: str  #: the layer stack it belongs to (``Llama.model.layers``), or "" without one
    arrived: float | None  #: ‖gradient reaching its (first) output‖
    sent: float | None  #: ‖gradient it sent to its (first) input‖
    parameters: float | None  #: ‖every parameter gradient under it‖ (None when it holds no parameter)
    input_rms: float | None  #: RMS of its (first) input in the forward (the hidden state entering the layer)
    #: which of ``arrived`` and ``sent`` were recorded but hold a NaN or an infinity (their norm is then None)
    nonfinite: tuple[str, ...] = ()

    @property
    def gain(self) -> float | None:
        """``sent / arrived``: about 1 for a residual block; far below 1 where the layer cuts the gradient."""
        if self.sent is None or not self.arrived:
            return None
        return self.sent / self.arrived


def norm_of(tensor: TensorValue | None) -> float | None:
    """The Euclidean norm of a recorded tensor from its stats (None without them): ``n·mean² + (n-1)·std²`` is its
    sum of squares, the recorded std being torch's unbiased one (a small tensor's norm would be off otherwise)."""
    if tensor is None or tensor.mean is None:
        return None
    n = math.prod(tensor.shape)
    std = tensor.std if n > 1 else 0.0
    if std is None or not (math.isfinite(tensor.mean) and math.isfinite(std)):
        return None
    return math.sqrt(n * tensor.mean * tensor.mean + (n - 1) * std * std)


def _parameters_norm(grad_pass: GradPass, module_path: str) -> float | None:
    prefix = module_path + "."
    squares = [n * n for name, t in grad_pass.parameters.items() if name.startswith(prefix)
               for n in (norm_of(t),) if n is not None]
    return math.sqrt(sum(squares)) if squares else None


def _stack_of(path: str) -> str:
    return path.rpartition(".")[0]


def _layer_calls(trace: Trace, grad_pass: GradPass) -> tuple[list[Node], bool]:
    """The layer blocks of ``trace`` (True), else its leaf calls that own parameters (False)."""
    nodes = trace.nodes()
    blocks = [n for n in nodes if is_layer_block_call(n.module_path, [c.module_path for c in n.children])]
    if blocks:
        return blocks, True
    leaves = [n for n in nodes if not n.children and n.call_index == 0 and grad_pass.module_parameters(n.module_path)]
    return leaves, False


def layer_gradients(trace: Trace, grad_pass: int = -1) -> list[LayerGradient]:
    """Each layer's gradients in backward pass ``grad_pass`` of ``trace`` (the latest by default); [] for a trace
    recorded without ``backward=True``. See the module docstring."""
    backward = trace.backward
    if backward is None:
        return []
    chosen = backward.passes[grad_pass]
    grads = chosen.trace.nodes()
    calls, layered = _layer_calls(trace, chosen)
    offsets: dict[str, float] = {}
    end = 0.0
    found = []
    for position, node in enumerate(calls):
        if node.index >= len(grads) or grads[node.index].module_path != node.module_path:
            continue  # the backward's tree is not this forward's: nothing to pair it with
        grad = grads[node.index]
        number = layer_number(node.module_path) if layered else None
        stack = _stack_of(node.module_path) if layered else ""
        if layered:
            if stack not in offsets:  # a new stack begins two steps after the last one's end: a hole between
                offsets[stack] = end + (2 if offsets else 0)
            x = offsets[stack] + (number or 0)
            end = max(end, x)
        else:
            x = float(position)
        arrived, sent = _first_tensor(grad.outputs), _first_tensor(grad.inputs)
        found.append(LayerGradient(
            path=node.module_path, node=node, x=x, layer=number, stack=stack,
            arrived=norm_of(arrived), sent=norm_of(sent),
            parameters=_parameters_norm(chosen, node.module_path), input_rms=_rms(node),
            nonfinite=tuple(kind for kind, t in (("arrived", arrived), ("sent", sent)) if t is not None and t.nonfinite)))
    if layered and chosen.norms:
        found = sorted(found + _pruned(chosen, offsets), key=lambda g: g.x)
    return found


def _pruned(grad_pass: GradPass, offsets: dict[str, float]) -> list[LayerGradient]:
    """The layer blocks pruning left out of the files, from the norms the pass kept of them (their first call)."""
    found = []
    for call, places in grad_pass.norms.items():
        stack, _, number = call.rpartition(".")
        if stack not in offsets or not number.isdigit():
            continue  # a later call of a block (``<path>@<n>``), or a stack the files do not show
        arrived, sent = places.get("outputs.0"), places.get("inputs.0")
        found.append(LayerGradient(
            path=call, node=None, x=offsets[stack] + int(number), layer=int(number), stack=stack,
            arrived=arrived if isinstance(arrived, (int, float)) else None,
            sent=sent if isinstance(sent, (int, float)) else None,
            parameters=_parameters_norm(grad_pass, call), input_rms=None,
            nonfinite=tuple(kind for kind, place in (("arrived", "outputs.0"), ("sent", "inputs.0"))
                            if place in places and places[place] is None)))
    return found


def _rms(node: Node) -> float | None:
    """The RMS of the call's (first) input: the hidden state entering a layer (a block's output is not recorded:
    the format keeps outputs for innermost calls only)."""
    out = _first_tensor(node.inputs)
    rms = rms_of(out) if out is not None else None
    return rms if rms is not None and math.isfinite(rms) else None


def as_rows(layers: list[LayerGradient]) -> list[dict[str, Any]]:
    """The layers as plain rows (for a table or JSON): path, x, layer, arrived, sent, gain, parameters, input_rms."""
    return [{"path": g.path, "x": g.x, "layer": g.layer, "arrived": g.arrived, "sent": g.sent,
             "gain": g.gain, "parameters": g.parameters, "input_rms": g.input_rms} for g in layers]
