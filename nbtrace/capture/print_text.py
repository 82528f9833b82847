"""The host half of torch's printed form of a tensor: characters from values, without torch.

``printing.py`` gathers, on a tensor's device, the elements torch would show and the
shape and suffixes they are printed with (a ``Layout``); the functions here write the
characters torch writes for them in scientific mode (``torch/_tensor_str.py`` is the
reference). Nothing here imports torch, so a capture of another framework's arrays
(``numpy_print.py``) writes the same text where torch is not installed.
"""

from __future__ import annotations

import math
from typing import NamedTuple

PREFIX = "tensor("
_INDENT = len(PREFIX)
STAT_NAMES = ("mean", "std", "min", "max")


class Options(NamedTuple):
    """The print options a tensor is printed with (read when its values are gathered)."""

    precision: int
    linewidth: int
    edgeitems: int
    threshold: float


#: the options a trace file is printed with under torch's default print options (``format_print_options``)
TRACE_OPTIONS = Options(precision=4, linewidth=120, edgeitems=3, threshold=1000)


class Layout(NamedTuple):
    """What the host needs, besides the gathered values, to print a tensor."""

    floating: bool
    narrow: bool  # a 16- or 32-bit float: every finite non-zero value prints with a two-digit exponent
    shape: tuple[int, ...]
    shown: tuple[int, ...]  # the shape of the gathered elements
    summarize: bool
    suffix: tuple[str, ...]
    options: Options


def shown_positions(size: int, edge: int) -> list[int]:
    """The positions along a dimension of ``size`` that a summarized tensor shows: the first and last ``edge``
    (all of them when there are no more than ``2 * edge``)."""
    return list(range(edge)) + list(range(size - edge, size)) if size > 2 * edge else list(range(size))


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


def format_stats(values: list[float], suffix: tuple[str, ...], options: Options) -> dict[str, str]:
    """``repr()`` of the 0-dim mean, std, min and max, from their values."""
    precision = options.precision
    if not suffix and 0.0 not in values and math.isfinite(sum(values)):  # the common case, without branches
        spec = f"tensor(%.{precision}e)"
        return dict(zip(STAT_NAMES, (spec % value for value in values)))
    return {
        name: add_suffixes(PREFIX + scalar_text(value, precision), suffix, _INDENT, options.linewidth)
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
    return add_suffixes(PREFIX + body, layout.suffix, _INDENT, layout.options.linewidth)


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
