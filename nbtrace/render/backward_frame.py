"""A backward pass as a pandas table (one row per recorded gradient) and the numbers of its plot.

``gradient_frame(grad_pass)`` is ``GradPass.to_dataframe()``: the forward's table columns (``render/frame.py``)
for the gradients, ``io`` saying which (``grad_output``: what reached the call's outputs, ``grad_input``: what it
sent to its inputs, ``parameter``: a parameter's gradient of the pass), plus ``rms`` and ``norm`` (from the stats:
``rms = sqrt(mean² + std²)``, ``norm = rms·sqrt(numel)``). ``gradient_norms(backward)`` computes what
``plot_gradient_norms`` draws: the norm of the gradient reaching each layer block's outputs, layer by layer.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..core.dtypes import short_dtype
from ..core.paths import is_layer_block_call
from .frame import SCHEMA as FRAME_SCHEMA, call_columns
from .table import Columns

if TYPE_CHECKING:  # pragma: no cover
    import pandas

    from ..core.gradients import Backward, GradPass
    from ..core.tensor import TensorValue

SCHEMA = FRAME_SCHEMA + (("rms", "float"), ("norm", "float"))  # the forward's table's columns, and the sizes
_IO = {"output": "grad_output", "input": "grad_input"}


def rms_of(tensor: TensorValue) -> float | None:
    """The RMS of a recorded tensor from its stats (None without them)."""
    mean, std = tensor.mean, tensor.std
    if mean is None or std is None:
        return None
    return math.sqrt(mean * mean + std * std)


def gradient_frame(grad_pass: GradPass) -> pandas.DataFrame:
    """One row per recorded gradient of one backward pass (see the module docstring)."""
    rows = Columns(SCHEMA)
    for position, node in enumerate(grad_pass.trace.nodes()):
        call = call_columns(position, node)
        for io, arg, tensor in node.tensors():
            _add(rows, call, _IO.get(io, io), arg, tensor)
    for name, tensor in grad_pass.parameters.items():
        module, _, short = name.rpartition(".")
        call = {"node": -1, "module_path": module, "name": module.rpartition(".")[2], "depth": module.count("."),
                "call_index": 0, "layer": None, "leaf": True}
        _add(rows, call, "parameter", short, tensor)
    return rows.frame("gradient table")


def _add(rows: Columns, call: dict[str, Any], io: str, arg: str, tensor: TensorValue) -> None:
    rms = rms_of(tensor)
    numel = math.prod(tensor.shape)
    rows.add(**call, io=io, arg=arg, shape=tensor.shape, dtype=short_dtype(tensor.dtype), numel=numel,
             mean=tensor.mean, std=tensor.std, min=tensor.min, max=tensor.max, rms=rms,
             norm=None if rms is None else rms * math.sqrt(numel))


def gradient_norms(backward: Backward, which: str = "outputs") -> list[tuple[str, float]]:
    """(layer block path, norm of the gradient at its ``outputs`` or ``inputs``) for each layer block of the
    latest pass, in forward order (pruned blocks are absent: the files do not hold them)."""
    found = []
    for node in backward.trace.nodes():
        children = [child.module_path for child in node.children]
        if not is_layer_block_call(node.module_path, children):
            continue
        value = node.outputs if which == "outputs" else node.inputs
        tensors = _first_tensor(value)
        rms = rms_of(tensors) if tensors is not None else None
        if rms is not None:
            found.append((node.module_path, rms * math.sqrt(math.prod(tensors.shape))))
    return found


def _first_tensor(value: Any) -> TensorValue | None:
    from ..core.tensor import TensorValue

    if isinstance(value, TensorValue):
        return value
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


_SIDE_SCHEMA = (
    ("node", "int"),
    ("module_path", "str"),
    ("depth", "int"),
    ("call_index", "int"),
    ("layer", "Int64"),
    ("output_rms", "float"),
    ("grad_output_rms", "float"),
    ("grad_input_rms", "float"),
    ("parameters", "int"),
    ("parameter_grad_norm", "float"),
)


def side_by_side(trace: Any, grad_pass: int = -1) -> pandas.DataFrame:
    """Each call's forward and backward in one row: the RMS of its (first) output in the forward, of the gradient
    that reached it and of what it sent to its (first) input in backward pass ``grad_pass``, and the norm of its
    own parameters' gradients (``parameters``: how many)."""
    backward = trace.backward
    if backward is None:
        raise ValueError(f"{trace.model_name} has no backward pass recorded (trace it with backward=True)")
    chosen = backward.passes[grad_pass]
    rows = Columns(_SIDE_SCHEMA)
    for forward, grads in zip(trace.nodes(), chosen.trace.nodes()):
        own = chosen.module_parameters(forward.module_path) if forward.call_index == 0 else {}
        norms = [rms_of(t) * math.sqrt(math.prod(t.shape)) for t in own.values() if rms_of(t) is not None]
        out = _first_tensor(forward.outputs)
        sent, arrived = _first_tensor(grads.inputs), _first_tensor(grads.outputs)
        rows.add(node=forward.index, module_path=forward.module_path, depth=forward.depth,
                 call_index=forward.call_index, layer=forward.layer,
                 output_rms=rms_of(out) if out is not None else None,
                 grad_output_rms=rms_of(arrived) if arrived is not None else None,
                 grad_input_rms=rms_of(sent) if sent is not None else None, parameters=len(own),
                 parameter_grad_norm=math.sqrt(sum(n * n for n in norms)) if norms else None)
    return rows.frame("forward and backward table")
