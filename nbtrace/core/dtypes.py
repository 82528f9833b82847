"""dtype names as the trace files write them (``torch.float32``), and what kind of number each holds."""

from __future__ import annotations

import functools

#: Floating dtypes from the most to the least precise, as short names.
FLOAT_PRECISION_ORDER = ("float64", "float32", "float16", "bfloat16")
FLOAT_DTYPES = frozenset(FLOAT_PRECISION_ORDER) | {
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
}


def short_dtype(dtype: str) -> str:
    """``"float32"`` for ``"torch.float32"``."""
    return dtype[6:] if dtype.startswith("torch.") else dtype


@functools.lru_cache(maxsize=256)
def is_float(dtype: str) -> bool:
    """True for a floating dtype (either spelling)."""
    return short_dtype(dtype) in FLOAT_DTYPES


@functools.lru_cache(maxsize=256)
def dtype_kind(dtype: str) -> str:
    """``"float"``, ``"bool"``, ``"complex"`` or ``"int"``: tensors pair up only within a kind."""
    name = short_dtype(dtype)
    if name in FLOAT_DTYPES:
        return "float"
    if name.startswith("complex"):
        return "complex"
    return "bool" if name == "bool" else "int"
