"""Keep a float64 twin in float64 through the model's own casts: JAX's counterpart of the PyTorch twin's ``Widen``.

A Flax model asks for narrower floats in its own code (``x.astype(jnp.float32)`` around a norm or a softmax,
``jnp.arange(..., dtype=jnp.float32)`` for rotary frequencies, ``preferred_element_type`` of a product); in its
twin those requests would round the float64 values back to float32. While ``widened()`` is active, a float dtype
narrower than float64 that code asks JAX for is read as float64, at the one door every such request passes
(``jax._src.dtypes.check_and_canonicalize_user_dtype``: ``astype``, ``asarray``, factories, reductions'
``dtype=``), the way JAX itself reads float64 as float32 when x64 is off; everything computed from those arrays
follows. The first primitive that still turns wider floats into a narrower one is noted (``low``: the twin is not
float64 from there); a constant the code writes in float32 (``jnp.finfo(jnp.float32).min`` as a mask's fill) is
not a narrowing. Both patches are removed on exit, whatever happened; they are process-wide while active, so no
other thread should run JAX meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

_F64 = np.dtype(np.float64)


def _narrow_float(dtype: Any) -> bool:
    try:
        d = np.dtype(dtype)
    except TypeError:
        return False
    return d != _F64 and (np.issubdtype(d, np.floating) or d.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"))


def _is_float(dtype: Any) -> bool:
    if dtype is None or _narrow_float(dtype):
        return dtype is not None
    try:
        return np.dtype(dtype) == _F64
    except TypeError:  # an extended dtype (a PRNG key)
        return False


class WidenState:
    """What a widened run noticed: the first primitive that returned a float narrower than float64."""

    def __init__(self) -> None:
        self.low: str | None = None


@contextmanager
def widened() -> Iterator[WidenState]:
    from jax._src import core, dtypes

    state = WidenState()
    original, asked = core.Primitive.bind, dtypes.check_and_canonicalize_user_dtype

    def user_dtype(dtype: Any, fun_name: Any = None) -> Any:
        found = asked(dtype, fun_name)
        return _F64 if _narrow_float(found) else found

    def bind(self: Any, *args: Any, **params: Any) -> Any:
        out = original(self, *args, **params)
        if state.low is None:
            widest = max((np.dtype(a.dtype).itemsize for a in args if _is_float(getattr(a, "dtype", None))),
                         default=0)
            for value in out if isinstance(out, (list, tuple)) else (out,):
                dtype = getattr(value, "dtype", None)
                # a narrowing of computed values (a constant of the code in float32 is not one: see sconst)
                if dtype is not None and _narrow_float(dtype) and np.dtype(dtype).itemsize < widest:
                    state.low = f"{self.name} returned {np.dtype(dtype).name}"
                    break
        return out

    core.Primitive.bind, dtypes.check_and_canonicalize_user_dtype = bind, user_dtype
    try:
        yield state
    finally:
        core.Primitive.bind, dtypes.check_and_canonicalize_user_dtype = original, asked
