"""torch's printed form of a tensor, produced without torch's (slow) printer.

The trace format stores ``str(tensor)`` and ``repr(tensor.mean())`` etc. as torch
prints them in scientific mode. torch's printer runs several tensor ops per
element; this module gathers the few elements torch would show with one
transfer and formats them in Python, character for character as torch does
(``torch/_tensor_str.py``). It covers plain, strided, real tensors that need no
autograd suffix; every function returns None for anything else, and the caller
falls back to torch's printer. The tests compare both on many random tensors
and print options.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch._tensor_str import PRINT_OPTS

_FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
_PLAIN = frozenset(
    {torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool}
    | {getattr(torch, name) for name in ("uint16", "uint32", "uint64") if hasattr(torch, name)}
)
_PREFIX = "tensor("


def fast_printable(tensor: torch.Tensor) -> bool:
    """True when this module can print ``tensor`` exactly as torch does."""
    return (
        type(tensor) is torch.Tensor
        and not tensor.requires_grad
        and tensor.layout == torch.strided
        and (tensor.dtype in _FLOATS or tensor.dtype in _PLAIN)
        and not tensor.is_meta
        and not tensor.is_quantized
        and not tensor.is_nested
        and tensor.device.type in ("cpu", "cuda")
        and PRINT_OPTS.edgeitems > 0
        and PRINT_OPTS.sci_mode is True
        and not torch._C._functorch.is_functorch_wrapped_tensor(tensor)
        and not torch._is_functional_tensor(tensor)
    )


def suffixes(tensor: torch.Tensor) -> list[str]:
    """The ``device=…`` / ``dtype=…`` suffixes torch prints after a non-empty tensor."""
    out = []
    device = tensor.device
    if device.type != torch._C._get_default_device() or (
        device.type == "cuda" and torch.cuda.current_device() != device.index
    ):
        out.append(f"device='{device}'")
    default = torch.get_default_dtype()
    complex_default = torch.cdouble if default == torch.double else torch.cfloat
    if tensor.dtype not in (default, complex_default, torch.int64, torch.bool):
        out.append(f"dtype={tensor.dtype}")
    return out


def add_suffixes(text: str, extra: list[str], indent: int) -> str:
    """torch's ``_add_suffixes``: append ``, suffix`` items, wrapping at the line width."""
    parts = [text]
    last_line = len(text) - text.rfind("\n") + 1
    width = PRINT_OPTS.linewidth
    for suffix in extra:
        if last_line + len(suffix) + 2 > width:
            parts.append(",\n" + " " * indent + suffix)
            last_line = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last_line += len(suffix) + 2
    parts.append(")")
    return "".join(parts)


def scalar_text(value: float, precision: int) -> str:
    """How torch prints one floating value on its own (a 0-dim tensor) in sci mode."""
    if value != 0.0 and math.isfinite(value):
        return f"{value:.{precision}e}"
    if math.isfinite(value):
        return f"{value:.0f}."  # 0. or -0.
    return f"{value:.0f}"  # nan, inf, -inf


def stat_reprs(tensor: torch.Tensor) -> dict[str, str] | None:
    """``repr()`` of mean, std, min and max, computed with one host transfer.

    Uses the very ops torch users call (``mean``, ``std``, and ``aminmax``, whose
    results equal ``min``/``max`` exactly), so the numbers are identical.
    """
    if not fast_printable(tensor) or tensor.dtype not in _FLOATS or tensor.numel() == 0:
        return None
    mean = tensor.mean()
    std = tensor.std() if tensor.numel() > 1 else torch.full_like(mean, math.nan)
    low, high = torch.aminmax(tensor)
    values = torch.stack([mean, std, low.to(mean.dtype), high.to(mean.dtype)]).tolist()
    precision = PRINT_OPTS.precision
    extra = suffixes(mean)
    indent = len(_PREFIX)
    return {
        name: add_suffixes(_PREFIX + scalar_text(value, precision), extra, indent)
        for name, value in zip(("mean", "std", "min", "max"), values)
    }


def tensor_text(tensor: torch.Tensor) -> str | None:
    """``str(tensor)`` as torch prints it with the current print options, or None."""
    if not fast_printable(tensor) or tensor.numel() == 0:
        return None
    summarize = tensor.numel() > PRINT_OPTS.threshold
    edge = PRINT_OPTS.edgeitems
    shown = tensor
    if summarize:
        for dim, size in enumerate(tensor.shape):
            if size > 2 * edge:
                index = torch.tensor(list(range(edge)) + list(range(size - edge, size)), device=tensor.device)
                shown = shown.index_select(dim, index)
    data = shown.tolist()
    flat = _flatten(data, tensor.dim())
    fmt = _element_formatter(flat, tensor.dtype in _FLOATS)
    indent = len(_PREFIX)
    body = _layout(data, tensor.dim(), indent, summarize, tensor.shape, fmt)
    return add_suffixes(_PREFIX + body, suffixes(tensor), indent)


def _flatten(data: Any, dim: int) -> list:
    if dim == 0:
        return [data]
    for _ in range(dim - 1):
        data = [item for row in data for item in row]
    return data


class _Formatter:
    """torch's ``_Formatter`` for the values torch would show, with sci mode on."""

    __slots__ = ("width", "floating", "sci", "precision")

    def __init__(self, width: int, floating: bool, sci: bool, precision: int) -> None:
        self.width = width
        self.floating = floating
        self.sci = sci
        self.precision = precision

    def __call__(self, value: Any) -> str:
        if self.floating:
            if self.sci:
                text = f"{value:{self.width}.{self.precision}e}"
            else:  # no finite non-zero value at all: integer mode
                text = f"{value:.0f}"
                if math.isfinite(value):
                    text += "."
        else:
            text = f"{value}"
        return text.rjust(self.width)


def _element_formatter(flat: list, floating: bool) -> _Formatter:
    precision = PRINT_OPTS.precision
    if not floating:
        return _Formatter(max([1] + [len(f"{v}") for v in flat]), False, False, precision)
    finite = [v for v in flat if v != 0.0 and math.isfinite(v)]
    if not finite:
        return _Formatter(1, True, False, precision)
    width = max(len(f"{v:.{precision}e}") for v in finite)
    return _Formatter(max(1, width), True, True, precision)


def _layout(data: Any, dim: int, indent: int, summarize: bool, shape: tuple, fmt: _Formatter) -> str:
    if dim == 0:
        return fmt(data)
    edge = PRINT_OPTS.edgeitems
    cut = summarize and shape[0] > 2 * edge
    if dim == 1:
        items = [fmt(v) for v in data]
        if cut:
            items = items[:edge] + [" ..."] + items[edge:]
        per_line = max(1, math.floor((PRINT_OPTS.linewidth - indent) / (fmt.width + 2)))
        lines = [", ".join(items[i : i + per_line]) for i in range(0, len(items), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    rows = [_layout(row, dim - 1, indent + 1, summarize, shape[1:], fmt) for row in data]
    if cut:
        rows = rows[:edge] + ["..."] + rows[edge:]
    return "[" + ("," + "\n" * (dim - 1) + " " * (indent + 1)).join(rows) + "]"
