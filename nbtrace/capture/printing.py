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
                shown = shown.index_select(dim, _edge_index(size, edge, tensor.device))
    data = shown.reshape(-1).tolist()
    items, width = _format_items(data, tensor.dtype in _FLOATS)
    indent = len(_PREFIX)
    if tensor.dim() == 0:
        body = items[0]
    else:
        body = _layout(items, 0, len(items), tuple(shown.shape), tuple(tensor.shape), indent, summarize, width)
    return add_suffixes(_PREFIX + body, suffixes(tensor), indent)


_EDGE_INDEX: dict[tuple[int, int, torch.device], torch.Tensor] = {}


def _edge_index(size: int, edge: int, device: torch.device) -> torch.Tensor:
    """The indices of the first and last ``edge`` items of a dimension of ``size``."""
    key = (size, edge, device)
    index = _EDGE_INDEX.get(key)
    if index is None:
        if len(_EDGE_INDEX) > 512:
            _EDGE_INDEX.clear()
        index = _EDGE_INDEX[key] = torch.tensor(
            list(range(edge)) + list(range(size - edge, size)), device=device
        )
    return index


def _format_items(data: list, floating: bool) -> tuple[list[str], int]:
    """Each value as torch formats it, padded to the common width (torch's ``_Formatter``)."""
    if not floating:
        texts = [f"{v}" for v in data]
        width = max(map(len, texts))
        return [t.rjust(width) for t in texts], width
    precision = PRINT_OPTS.precision
    texts = [f"{v:.{precision}e}" for v in data]
    finite = [len(t) for t, v in zip(texts, data) if v != 0.0 and math.isfinite(v)]
    if not finite:  # no finite non-zero value: torch's integer mode, width 1
        return [f"{v:.0f}." if math.isfinite(v) else f"{v:.0f}" for v in data], 1
    width = max(finite)
    return [t.rjust(width) for t in texts], width


def _layout(
    items: list[str], start: int, stop: int, shown: tuple, shape: tuple, indent: int, summarize: bool, width: int
) -> str:
    """torch's ``_tensor_str_with_formatter`` over ``items[start:stop]`` (the shown values, flat)."""
    edge = PRINT_OPTS.edgeitems
    cut = summarize and shape[0] > 2 * edge
    if len(shape) == 1:
        row = items[start:stop]
        if cut:
            row = row[:edge] + [" ..."] + row[edge:]
        per_line = max(1, math.floor((PRINT_OPTS.linewidth - indent) / (width + 2)))
        lines = [", ".join(row[i : i + per_line]) for i in range(0, len(row), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    step = (stop - start) // shown[0]
    rows = [
        _layout(items, at, at + step, shown[1:], shape[1:], indent + 1, summarize, width)
        for at in range(start, stop, step)
    ]
    if cut:
        rows = rows[:edge] + ["..."] + rows[edge:]
    return "[" + ("," + "\n" * (len(shape) - 1) + " " * (indent + 1)).join(rows) + "]"
