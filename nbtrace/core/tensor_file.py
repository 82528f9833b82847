"""Reading one tensor file of a trace (safetensors, the tensor under ``data``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import TraceFormatError

if TYPE_CHECKING:  # pragma: no cover
    import torch


def load_tensor(path: Path | None) -> torch.Tensor:
    """The tensor stored under ``data`` in a safetensors file written by a trace."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if path is None or not Path(path).is_file():
        raise TraceFormatError(path, "safetensors file referenced by the trace is missing")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise TraceFormatError(path, f"is not a readable safetensors file: {exc}") from None
    if "data" not in tensors:
        raise TraceFormatError(path, "holds no 'data' tensor")
    return tensors["data"]
