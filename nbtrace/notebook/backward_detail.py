"""The gradients of one call in the TraceView detail pane, for a trace recorded with ``backward=True``.

Beside a call's inputs and outputs the pane lists, from the latest backward pass (``trace.backward``), the
gradient that reached each output (``out``, argument ``grad <place>``), what the call sent to each input (``in``,
``grad <place>``) and its own parameters' gradients (``grad <name>``), with the same shape, dtype, stats and
printed values as the forward's tensors; the front end shows them as it shows any tensor.
"""

from __future__ import annotations

from typing import Any

from ..core.node import Node
from ..core.trace import Trace
from .detail import _walk, tensor_detail


def add_gradients(trace: Trace, node: Node, detail: dict[str, Any]) -> None:
    """Append ``node``'s gradients to its ``detail`` (nothing where the trace has no backward pass)."""
    try:
        backward = trace.backward
    except Exception:  # noqa: BLE001 - a broken backward file must not cost the user the forward's view
        return
    if backward is None:
        return
    nodes = backward.trace.nodes()
    if node.index >= len(nodes) or nodes[node.index].module_path != node.module_path:
        return
    grads = nodes[node.index]
    tensors: list[dict[str, Any]] = []
    if grads.outputs is not None:
        _walk(grads.outputs, "out", "output", tensors, [])
    if grads.inputs is not None:
        _walk(grads.inputs, "", "input", tensors, [])
    if node.call_index == 0:
        for name, tensor in backward.last.module_parameters(node.module_path).items():
            tensors.append(tensor_detail("output", name, tensor))
    for tensor in tensors:
        tensor["arg"] = f"grad {tensor['arg']}"
    detail["tensors"] = list(detail.get("tensors", [])) + tensors
