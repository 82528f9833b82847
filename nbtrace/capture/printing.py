"""torch's printed form of a tensor, produced without torch's (slow) printer.

The trace format stores ``str(tensor)`` and ``repr(tensor.mean())`` etc. as torch
prints them in scientific mode. torch's printer runs several tensor ops per
element; here the work is split in two halves (``torch/_tensor_str.py`` is the
reference for both):

- on the tensor's device, ``gather`` copies the few elements torch would show
  and ``stat_pieces`` computes mean, std, min and max with the very ops users
  call; nothing is read yet;
- on the host, once those values arrived (``transfer.py`` moves them, many
  tensors at once), ``format_text`` and ``format_stats`` write the characters
  torch writes.

It covers plain, strided, real tensors that need no autograd suffix
(``fast_printable``); the caller falls back to torch's printer for anything
else. The tests compare both on many random tensors and print options.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch._tensor_str import PRINT_OPTS

from . import transfer

_FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
_NARROW = frozenset({torch.float16, torch.bfloat16, torch.float32})
_UINTS = frozenset(getattr(torch, name) for name in ("uint16", "uint32", "uint64") if hasattr(torch, name))
_PLAIN = frozenset({torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool} | _UINTS)
_PREFIX = "tensor("
_INDENT = len(_PREFIX)
STAT_NAMES = ("mean", "std", "min", "max")


class Options(NamedTuple):
    """The print options a tensor is printed with (read when its values are gathered)."""

    precision: int
    linewidth: int
    edgeitems: int
    threshold: float


def current_options() -> Options:
    return Options(PRINT_OPTS.precision, PRINT_OPTS.linewidth, PRINT_OPTS.edgeitems, PRINT_OPTS.threshold)


class Layout(NamedTuple):
    """What the host needs, besides the gathered values, to print a tensor."""

    floating: bool
    narrow: bool  # a 16- or 32-bit float: every finite non-zero value prints with a two-digit exponent
    shape: tuple[int, ...]
    shown: tuple[int, ...]  # the shape of the gathered elements
    summarize: bool
    suffix: tuple[str, ...]
    options: Options


def fast_printable(tensor: torch.Tensor) -> bool:
    """True when this module can print ``tensor`` exactly as torch does."""
    return (
        type(tensor) is torch.Tensor
        and not tensor.requires_grad
        and tensor.layout == torch.strided
        and (tensor.dtype in _FLOATS or tensor.dtype in _PLAIN)
        and (tensor.is_cpu or tensor.is_cuda)  # not meta, not another backend
        and not tensor.is_quantized
        and not tensor.is_nested
        and PRINT_OPTS.edgeitems > 0
        and PRINT_OPTS.sci_mode is True
        and not torch._C._functorch.is_functorch_wrapped_tensor(tensor)
        and not torch._is_functional_tensor(tensor)
    )


def suffixes(tensor: torch.Tensor) -> tuple[str, ...]:
    """The ``device=…`` / ``dtype=…`` suffixes torch prints after a non-empty tensor."""
    out = []
    if tensor.is_cpu:
        if torch._C._get_default_device() != "cpu":
            out.append("device='cpu'")
    else:
        device = tensor.device
        if device.type != torch._C._get_default_device() or (
            device.type == "cuda" and torch.cuda.current_device() != device.index
        ):
            out.append(f"device='{device}'")
    dtype = tensor.dtype
    if dtype is not torch.float32 or torch.get_default_dtype() is not torch.float32:
        default = torch.get_default_dtype()
        complex_default = torch.cdouble if default == torch.double else torch.cfloat
        if dtype not in (default, complex_default, torch.int64, torch.bool):
            out.append(f"dtype={dtype}")
    return tuple(out)


def add_suffixes(text: str, extra: tuple[str, ...], indent: int, linewidth: int) -> str:
    """torch's ``_add_suffixes``: append ``, suffix`` items, wrapping at the line width."""
    if not extra:
        return text + ")"
    parts = [text]
    last_line = len(text) - text.rfind("\n") + 1
    for suffix in extra:
        if last_line + len(suffix) + 2 > linewidth:
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


# -- on the device -------------------------------------------------------------
def stat_pieces(tensor: torch.Tensor) -> list[torch.Tensor]:
    """mean, std, min and max of a non-empty floating tensor, as 0-dim tensors on its device.

    The very ops torch users call (``aminmax`` equals ``min``/``max`` exactly), so the numbers are identical.
    """
    mean = tensor.mean()
    std = tensor.std() if tensor.numel() > 1 else torch.full_like(mean, math.nan)
    low, high = torch.aminmax(tensor)
    return [mean, std, low, high]


def gather(tensor: torch.Tensor, options: Options, suffix: tuple[str, ...]) -> tuple[torch.Tensor, Layout]:
    """A flat copy (on the tensor's device) of the elements torch shows, and how to lay them out.

    ``suffix``: ``suffixes(tensor)``.
    """
    shape = tuple(tensor.shape)
    summarize = tensor.numel() > options.threshold
    if not summarize:  # every element; a copy: the recorded tensor may change after this
        flat, shown = tensor.clone(memory_format=torch.contiguous_format).view(-1), shape
    elif tensor.dtype in _UINTS:  # no take or index_select for these
        edge = options.edgeitems
        kept = tensor
        for dim, size in enumerate(shape):
            if size > 2 * edge:
                kept = torch.cat([kept.narrow(dim, 0, edge), kept.narrow(dim, size - edge, edge)], dim)
        flat, shown = kept.reshape(-1).clone(), tuple(kept.shape)
    else:
        index, shown = _edge_index(shape, options.edgeitems, tensor.device)
        flat = torch.take(tensor, index)  # one op: the shown elements, in order, as a new tensor
    dtype = tensor.dtype
    return flat, Layout(dtype in _FLOATS, dtype in _NARROW, shape, shown, summarize, suffix, options)


_EDGE_INDEX: dict[tuple, tuple[torch.Tensor, tuple[int, ...]]] = {}


def _edge_index(shape: tuple[int, ...], edge: int, device: torch.device) -> tuple[torch.Tensor, tuple[int, ...]]:
    """Flat (row-major) positions of the elements a summarized tensor of ``shape`` shows, and their shape."""
    key = (shape, edge, device)
    found = _EDGE_INDEX.get(key)
    if found is None:
        if len(_EDGE_INDEX) > 512:
            _EDGE_INDEX.clear()
        flat, shown = [0], []
        for size in shape:
            kept = list(range(edge)) + list(range(size - edge, size)) if size > 2 * edge else list(range(size))
            flat = [position * size + k for position in flat for k in kept]
            shown.append(len(kept))
        found = _EDGE_INDEX[key] = (torch.tensor(flat, dtype=torch.int64, device=device), tuple(shown))
    return found


# -- on the host ---------------------------------------------------------------
def format_stats(values: list[float], suffix: tuple[str, ...], options: Options) -> dict[str, str]:
    """``repr()`` of the 0-dim mean, std, min and max, from their values."""
    precision = options.precision
    if not suffix and 0.0 not in values and math.isfinite(sum(values)):  # the common case, without branches
        spec = f"tensor(%.{precision}e)"
        return dict(zip(STAT_NAMES, (spec % value for value in values)))
    return {
        name: add_suffixes(_PREFIX + scalar_text(value, precision), suffix, _INDENT, options.linewidth)
        for name, value in zip(STAT_NAMES, values)
    }


def format_text(values: list, layout: Layout) -> str:
    """``str(tensor)`` from the gathered values, as torch prints it."""
    if layout.narrow and 0.0 not in values and math.isfinite(sum(values)):
        # The common case, in one formatting call: finite, non-zero values of a 16/32-bit float, whose
        # exponents all have two digits; a space for the sign pads each to the common width when one is < 0.
        spec = f"% .{layout.options.precision}e" if min(values) < 0 else f"%.{layout.options.precision}e"
        template = _TEMPLATES.get((layout, spec))
        if template is None:
            template = _template(layout, len(values), len(spec % 1.0), spec)
        return template % tuple(values)
    items, width = _format_items(values, layout.floating, layout.options.precision)
    if max(map(len, items)) != width:  # e.g. torch's integer mode, or -0. wider than every other value
        return _text(items, layout, width)
    # Every item is ``width`` wide: the text around them depends on the layout and the width only.
    template = _TEMPLATES.get((layout, width))
    if template is None:
        template = _template(layout, len(items), width, "%s")
    return template % tuple(items)


_TEMPLATES: dict[tuple, str] = {}


def _template(layout: Layout, count: int, width: int, spec: str) -> str:
    """The text of a tensor with ``spec`` (a %-format) in place of each of its ``count`` items, ``width`` wide.

    Cached under ``(layout, width)`` for ``%s`` (items formatted already), else under ``(layout, spec)``.
    """
    if len(_TEMPLATES) > 1024:
        _TEMPLATES.clear()
    slot = "\0" * width
    text = _text([slot] * count, layout, width).replace("%", "%%").replace(slot, spec)
    _TEMPLATES[(layout, width) if spec == "%s" else (layout, spec)] = text
    return text


def _text(items: list[str], layout: Layout, width: int) -> str:
    if not layout.shape:
        body = items[0]
    else:
        body = _layout(items, 0, len(items), layout.shown, layout.shape, _INDENT, layout.summarize, width,
                       layout.options)
    return add_suffixes(_PREFIX + body, layout.suffix, _INDENT, layout.options.linewidth)


def _format_items(data: list, floating: bool, precision: int) -> tuple[list[str], int]:
    """Each value as torch formats it, padded to the common width (torch's ``_Formatter``)."""
    if not floating:
        texts = list(map(str, data))
        width = max(map(len, texts))
        return [t.rjust(width) for t in texts], width
    # The common case: every value finite, non-zero, with exponents of one width. A space for the sign
    # then pads each text to the common width already (nan, inf and -inf are shorter; 0.0 == -0.0).
    signed = list(map(f"% .{precision}e".__mod__, data))  # printf-style: the same text as format(), faster
    lengths = set(map(len, signed))
    if len(lengths) == 1 and 0.0 not in data and min(lengths) > 4:
        width = len(signed[0])
        if min(data) < 0:
            return signed, width
        return [t[1:] for t in signed], width - 1
    texts = list(map(f"%.{precision}e".__mod__, data))
    finite = [len(t) for t, v in zip(texts, data) if v != 0.0 and math.isfinite(v)]
    if not finite:  # no finite non-zero value: torch's integer mode, width 1
        return [f"{v:.0f}." if math.isfinite(v) else f"{v:.0f}" for v in data], 1
    width = max(finite)
    return [t.rjust(width) for t in texts], width


def _layout(
    items: list[str], start: int, stop: int, shown: tuple, shape: tuple, indent: int, summarize: bool, width: int,
    options: Options,
) -> str:
    """torch's ``_tensor_str_with_formatter`` over ``items[start:stop]`` (the shown values, flat)."""
    edge = options.edgeitems
    cut = summarize and shape[0] > 2 * edge
    if len(shape) == 1:
        row = items[start:stop]
        if cut:
            row = row[:edge] + [" ..."] + row[edge:]
        per_line = max(1, math.floor((options.linewidth - indent) / (width + 2)))
        if len(row) <= per_line:
            return "[" + ", ".join(row) + "]"
        lines = [", ".join(row[i : i + per_line]) for i in range(0, len(row), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    step = (stop - start) // shown[0]
    rows = [
        _layout(items, at, at + step, shown[1:], shape[1:], indent + 1, summarize, width, options)
        for at in range(start, stop, step)
    ]
    if cut:
        rows = rows[:edge] + ["..."] + rows[edge:]
    return "[" + ("," + "\n" * (len(shape) - 1) + " " * (indent + 1)).join(rows) + "]"


# -- both halves at once, for one tensor -----------------------------------------
def stat_reprs(tensor: torch.Tensor) -> dict[str, str] | None:
    """``repr()`` of mean, std, min and max of ``tensor`` (one transfer), or None when not fast printable."""
    if not fast_printable(tensor) or tensor.dtype not in _FLOATS or tensor.numel() == 0:
        return None
    values = transfer.values(torch.stack(stat_pieces(tensor)))
    return format_stats(values, suffixes(tensor), current_options())


def tensor_text(tensor: torch.Tensor) -> str | None:
    """``str(tensor)`` as torch prints it with the current print options (one transfer), or None."""
    if not fast_printable(tensor) or tensor.numel() == 0:
        return None
    flat, layout = gather(tensor, current_options(), suffixes(tensor))
    return format_text(transfer.values(flat), layout)
