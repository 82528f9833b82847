"""torch's printed form of a numpy array, without torch: what ``str(torch.from_numpy(a))`` prints.

A capture of another framework's arrays (JAX/Flax) writes the trace format where torch is not
installed: the printed values and the four stat strings must be the characters torch writes for a
tensor of the same values and dtype. ``print_text.py`` writes them from the values; this module
gathers the values torch would show and names the dtype and shape as torch does. Arrays print as
torch prints a CPU tensor under a float32 default dtype, in scientific mode (``TRACE_OPTIONS``:
the options of a trace file unless told otherwise).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from .print_text import (
    PREFIX,
    TRACE_OPTIONS,
    Layout,
    Options,
    add_suffixes,
    format_stats,
    format_text,
    shown_positions,
)

#: torch's name of each numpy dtype this module prints (``torch.<name>``)
TORCH_NAMES = {
    np.dtype(np.float16): "float16",
    np.dtype(ml_dtypes.bfloat16): "bfloat16",
    np.dtype(np.float32): "float32",
    np.dtype(np.float64): "float64",
    np.dtype(np.int8): "int8",
    np.dtype(np.int16): "int16",
    np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64",
    np.dtype(np.uint8): "uint8",
    np.dtype(np.uint16): "uint16",
    np.dtype(np.uint32): "uint32",
    np.dtype(np.uint64): "uint64",
    np.dtype(np.bool_): "bool",
}
_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
_NARROW = frozenset({"float16", "bfloat16", "float32"})  # also the dtypes with stats in the trace format
_UNSUFFIXED = frozenset({"float32", "int64", "bool"})  # the default dtype, and those torch infers from the text


def torch_name(a: np.ndarray) -> str:
    """torch's name of the array's dtype, without ``torch.`` (``"bfloat16"``); TypeError for other dtypes."""
    name = TORCH_NAMES.get(np.asarray(a).dtype)
    if name is None:
        raise TypeError(f"no torch dtype prints like numpy's {np.asarray(a).dtype}")
    return name


def dtype_text(a: np.ndarray) -> str:
    """``repr(tensor.dtype)``: ``"torch.float32"``, ``"torch.bfloat16"``, …"""
    return "torch." + torch_name(a)


def shape_text(a: np.ndarray) -> str:
    """``repr(tensor.shape)``: ``"torch.Size([2, 3])"``."""
    return f"torch.Size({list(np.shape(a))})"


def dtype_suffix(a: np.ndarray) -> tuple[str, ...]:
    """The ``dtype=…`` suffix torch prints after a non-empty CPU tensor of the array's dtype (or none)."""
    name = torch_name(a)
    return () if name in _UNSUFFIXED else (f"dtype=torch.{name}",)


def array_text(a: np.ndarray, options: Options | None = None) -> str:
    """``str(tensor)`` of a tensor holding the array's values in its dtype, as torch prints it in sci mode."""
    options = TRACE_OPTIONS if options is None else options
    if options.edgeitems < 1:
        raise ValueError("torch prints no values with edgeitems < 1; this printer needs at least 1")
    a = np.asarray(a)
    name = torch_name(a)
    if a.size == 0:  # torch names the shape (unless 1-d) and any dtype but the default
        extra = () if a.ndim == 1 else (f"size={tuple(a.shape)}",)
        extra += () if name == "float32" else (f"dtype=torch.{name}",)
        return add_suffixes(PREFIX + "[]", extra, len(PREFIX), options.linewidth)
    summarize = a.size > options.threshold
    shown = _edges(a, options.edgeitems) if summarize and a.ndim else a
    layout = Layout(name in _FLOATS, name in _NARROW, tuple(a.shape), tuple(shown.shape), summarize,
                    dtype_suffix(a), options)
    return format_text(python_values(shown), layout)


def stat_values(a: np.ndarray) -> list[float] | None:
    """mean, std (unbiased; NaN for one element), min and max of a non-empty float16/bfloat16/float32 array,
    each as the array's dtype holds it (as Python floats); None for other arrays.

    min and max are torch's exactly. mean and std are computed in float64 and rounded as torch rounds
    its own: a float32 mean is the float32 sum divided by the count in float32, a float32 std the
    float64 root of the squared deviations from that mean, and 16-bit results are rounded once from
    float32. torch's own sums (another order, float32 accumulators) can differ in the last bit.
    """
    a = np.asarray(a)
    name = TORCH_NAMES.get(a.dtype)
    if name not in _NARROW or a.size == 0:
        return None
    x = a.astype(np.float64).reshape(-1)
    n = x.size
    with np.errstate(all="ignore"):
        total = np.float32(x.sum())  # torch's sum: a float32 (an accumulation in float32 overflows there too)
        mean32 = np.float32(total / np.float32(n))
        std = math.nan
        if n > 1:
            if name == "float32":  # torch's two-pass std of float32, in float64, around its float32 mean
                deviation = x - np.float64(mean32)
            else:  # torch's Welford in float32 for 16-bit floats: an accurate std, rounded
                deviation = x - x.mean()
            std = float(np.float32(np.sqrt(np.dot(deviation, deviation) / (n - 1))))
        values = [float(mean32), std]
        if np.isnan(x).any():
            values += [math.nan, math.nan]
        else:
            values += [float(x.min()), float(x.max())]
        return [float(np.array(v, np.float32).astype(a.dtype)) for v in values[:2]] + values[2:]


def stat_texts(a: np.ndarray, options: Options | None = None) -> dict[str, str] | None:
    """``repr()`` of torch's 0-dim mean, std, min and max of the array (``tensor(1.2345e-01)``, with torch's
    ``dtype=`` suffix for 16-bit floats) for float16/bfloat16/float32 arrays; None for others and empty ones."""
    values = stat_values(a)
    if values is None:
        return None
    return format_stats(values, dtype_suffix(a), TRACE_OPTIONS if options is None else options)


def python_values(a: np.ndarray) -> list:
    """The array's elements, flat in row-major order, as Python numbers (floats exact, ints, bools)."""
    if a.dtype.kind == "f" or a.dtype == ml_dtypes.bfloat16:
        return a.astype(np.float64).reshape(-1).tolist()
    return a.reshape(-1).tolist()


def _edges(a: np.ndarray, edge: int) -> np.ndarray:
    """The elements a summarized tensor shows: the first and last ``edge`` of every longer dimension."""
    return a[np.ix_(*(shown_positions(size, edge) for size in a.shape))]
