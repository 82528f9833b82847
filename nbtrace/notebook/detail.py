"""One call's details for the TraceView detail pane, built only when a row is selected.

Every input and output: tensors with shape, dtype and stats, plus their printed
value lines (FULL trace) or safetensors file; non-tensor arguments as text.
"""

from __future__ import annotations

from typing import Any

from ..core.dtypes import short_dtype
from ..core.node import Node
from ..core.tensor import TensorValue
from ..render.vocabulary import format_number

MAX_LINES = 120  # printed value lines sent per tensor; the rest is counted, not sent
MAX_LINE_CHARS = 400


def _number(value: float | None) -> str:
    return format_number(value, missing="")


def tensor_detail(io: str, arg: str, tensor: TensorValue) -> dict[str, Any]:
    """What the pane shows for one tensor."""
    out: dict[str, Any] = {
        "io": io,
        "arg": arg,
        "shape": list(tensor.shape),
        "dtype": short_dtype(tensor.dtype),
        "mean": _number(tensor.mean),
        "std": _number(tensor.std),
        "min": _number(tensor.min),
        "max": _number(tensor.max),
        "nonfinite": tensor.nonfinite,
    }
    lines = tensor.lines
    if lines is not None:
        out["lines"] = [line[:MAX_LINE_CHARS] for line in lines[:MAX_LINES]]
        out["more_lines"] = max(0, len(lines) - MAX_LINES)
    elif tensor.ref is not None:
        path = tensor.path
        out["file"] = tensor.ref
        out["file_path"] = str(path.resolve()) if path is not None else ""
        out["file_exists"] = bool(path is not None and path.is_file())
    return out


def _walk(value: Any, place: str, io: str, tensors: list, others: list) -> None:
    if isinstance(value, TensorValue):
        tensors.append(tensor_detail(io, place or io, value))
    elif isinstance(value, dict):
        for key, item in value.items():
            _walk(item, f"{place}.{key}" if place else str(key), io, tensors, others)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _walk(item, f"{place}.{i}" if place else str(i), io, tensors, others)
    elif value is not None:
        others.append({"io": io, "arg": place or io, "text": str(value)[:MAX_LINE_CHARS]})


def node_detail(node: Node, calls_of_path: int = 1) -> dict[str, Any]:
    """The detail pane's content for ``node`` (a comparison adds its part: ``compare_payload.comparison_detail``)."""
    tensors: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    if node.inputs is not None:
        _walk(node.inputs, "", "input", tensors, others)
    if node.outputs is not None:
        _walk(node.outputs, "out", "output", tensors, others)
    detail: dict[str, Any] = {
        "path": node.module_path,
        "call": node.call_index,
        "calls": calls_of_path,
        "depth": node.depth,
        "children": len(node.children),
        "outputs_recorded": node.outputs is not None,
        "duration_ms": None if node.duration is None else round(node.duration * 1000, 3),
        "error": dict(node.error) if node.error is not None else None,
        "tensors": tensors,
        "values": others,
    }
    return detail
