"""The gradients of one call in the TraceView detail pane, for a trace recorded with ``backward=True``.

Beside a call's inputs and outputs the pane lists, from the latest backward pass (``trace.backward``), the
gradient that reached each output (``out``, argument ``grad <place>``), what the call sent to each input (``in``,
``grad <place>``) and its own parameters' gradients (``grad <name>``), with the same shape, dtype, stats and
printed values as the forward's tensors; the front end shows them as it shows any tensor. Above them,
``detail["backward"]`` puts the call's forward and backward side by side (each input and output place: the forward
tensor's RMS, the norm and RMS of its gradient) and lists the gradients of every parameter under the module (its
submodules' too: a layer block holds none itself), each with its norm (``gradient_plot.js`` draws the table).
"""

from __future__ import annotations

from typing import Any

from ..core.node import Node
from ..core.gradients import GradPass
from ..core.tensor import TensorValue
from ..core.trace import Trace
from ..render.backward_frame import rms_of
from ..render.gradient_layers import norm_of
from ..render.vocabulary import format_number, short_shape
from .detail import _walk, tensor_detail

#: a gradient's norm where it holds a NaN or an infinity (the tree's badge says the same)
NONFINITE = "NaN/inf"
#: parameters listed under one module (the rest is counted, and in the total)
MAX_PARAMETERS = 40
#: the side-by-side table's words (the front end spells none)
SIDE_WORDS = {
    "heading": "forward and backward · backward pass {k} of {n}",
    "columns": ["", "forward rms", "‖grad‖", "grad rms"],
    "input": "in {place}: sent",
    "output": "{place}: reached",
    "parameters": "parameter gradients under this module: {count}, ‖all‖ {total}",
    "more": "… {n} more",
    "b_columns": ["", "forward rms", "‖grad‖ a", "‖grad‖ b"],
    "b_parameter_columns": ["", "", "‖grad‖ a", "‖grad‖ b"],
}


def _gradients_of(trace: Trace, node: Node) -> tuple[Any, Node] | None:
    """The backward of ``trace`` and ``node``'s gradients in its latest pass, or None."""
    try:
        backward = trace.backward
    except Exception:  # noqa: BLE001 - a broken backward file must not cost the user the forward's view
        return None
    if backward is None:
        return None
    nodes = backward.trace.nodes()
    if node.index >= len(nodes) or nodes[node.index].module_path != node.module_path:
        return None
    return backward, nodes[node.index]


def add_gradients(trace: Trace, node: Node, detail: dict[str, Any]) -> None:
    """Append ``node``'s gradients to its ``detail`` (nothing where the trace has no backward pass)."""
    found = _gradients_of(trace, node)
    if found is None:
        return
    backward, grads = found
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
    detail["backward"] = side_by_side(node, grads, backward.last, len(backward))


def add_b_gradients(b_trace: Trace, b_node: Node | None, detail: dict[str, Any]) -> None:
    """In a comparison: b's gradient norms beside a's in ``detail``'s side-by-side table (``b_node``: the call of b
    paired with the call shown; "–" where b has none)."""
    table = detail.get("backward")
    found = _gradients_of(b_trace, b_node) if b_node is not None else None
    if table is None or found is None:
        return
    backward, grads = found
    assert b_node is not None
    sent = {SIDE_WORDS[io].format(place=place): _norm(t) for io, place, t in grads.tensors()}
    for row in table["rows"]:
        row[3:] = [sent.get(row[0], "–")]  # b's norm where a's RMS was: the pane stays narrow
    prefix = b_node.module_path + "."
    params = {name[len(prefix):]: _norm(t) for name, t in backward.last.parameters.items() if name.startswith(prefix)}
    for row in table["parameters"]:
        row.append(params.get(row[0], "–"))
    table["words"].update(columns=SIDE_WORDS["b_columns"], parameter_columns=SIDE_WORDS["b_parameter_columns"])


def _number(value: float | None) -> str:
    return format_number(value, missing="–")


def _norm(tensor: TensorValue | None) -> str:
    """A recorded gradient's norm in words: ``NaN/inf`` where it holds one, "–" where there is none."""
    if tensor is not None and tensor.nonfinite:
        return NONFINITE
    return _number(norm_of(tensor))


def _natural(name: str) -> tuple[tuple[int, int | str], ...]:
    """A parameter name's sort key among one module's: ``layers.10`` after ``layers.9``."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in name.split("."))


def side_by_side(node: Node, grads: Node, grad_pass: GradPass, passes: int) -> dict[str, Any]:
    """The call's forward and backward in one table, and its parameters' gradients, in the order their modules were
    called (see the module docstring)."""
    forward = {(io, place): t for io, place, t in node.tensors()}
    backward = {(io, place): t for io, place, t in grads.tensors()}
    rows = []
    for io in ("output", "input"):
        places = [key for key in dict.fromkeys([*forward, *backward]) if key[0] == io]
        for key in places:
            seen: TensorValue | None = forward.get(key)
            grad: TensorValue | None = backward.get(key)
            rows.append([SIDE_WORDS[io].format(place=key[1]), _number(rms_of(seen) if seen is not None else None),
                         _norm(grad), _number(rms_of(grad) if grad is not None else None)])
    prefix = node.module_path + "."
    order: dict[str, int] = {}
    for k, call in enumerate(node.walk()):
        order.setdefault(call.module_path, k)
    under = sorted(((name[len(prefix):], t) for name, t in grad_pass.parameters.items() if name.startswith(prefix)),
                   key=lambda item: (order.get(f"{prefix}{item[0]}".rpartition(".")[0], len(order)), _natural(item[0])))
    norms = [norm_of(t) for _, t in under]
    total = _number(sum(n * n for n in norms if n is not None) ** 0.5 if any(n is not None for n in norms) else None)
    if any(t.nonfinite for _, t in under):
        total = NONFINITE
    listed = [[name, short_shape(t.shape), _norm(t)] for name, t in under[:MAX_PARAMETERS]]
    words = dict(SIDE_WORDS, heading=SIDE_WORDS["heading"].format(k=grad_pass.index + 1, n=passes),
                 parameters=SIDE_WORDS["parameters"].format(count=len(under), total=total),
                 more=SIDE_WORDS["more"].format(n=len(under) - len(listed)) if len(under) > len(listed) else "")
    return {"words": words, "rows": rows, "parameters": listed}
