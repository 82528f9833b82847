"""Walking the values a Flax call takes and returns: float leaves by place, and arrays mapped through a tree."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .serialize import host, is_array


def is_float(a: np.ndarray) -> bool:
    return np.issubdtype(a.dtype, np.floating) or a.dtype.name == "bfloat16"


def float_leaves(value: Any, place: str = "", depth: int = 0) -> Iterator[tuple[str, np.ndarray]]:
    """``(place, array)`` of every non-empty float array in ``value`` (``out``, ``out.0``, ``kwargs.x.key``)."""
    if is_array(value):
        a = host(value)
        if is_float(a) and a.size:
            yield place, a
    elif isinstance(value, (list, tuple)) and depth < 8:
        for i, item in enumerate(value):
            yield from float_leaves(item, f"{place}.{i}" if place else str(i), depth + 1)
    elif hasattr(value, "items") and depth < 8:
        for key, item in value.items():
            yield from float_leaves(item, f"{place}.{key}" if place else str(key), depth + 1)


def tree_map_arrays(value: Any, fn: Callable[..., Any], with_path: bool = False, path: str = "") -> Any:
    """``value`` with every array ``a`` replaced by ``fn(host(a))`` (``fn(a, path)`` with ``with_path``)."""
    if is_array(value):
        return fn(host(value), path) if with_path else fn(host(value))
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(tree_map_arrays(v, fn, with_path, f"{path}.{i}") for i, v in enumerate(value)))
    if isinstance(value, (list, tuple)):
        return type(value)(tree_map_arrays(v, fn, with_path, f"{path}.{i}") for i, v in enumerate(value))
    if hasattr(value, "items"):
        return {k: tree_map_arrays(v, fn, with_path, f"{path}.{k}") for k, v in value.items()}
    return value


@contextmanager
def eager_remat() -> Iterator[None]:
    """``jax.checkpoint`` (``jax.remat``, which ``nn.remat`` calls) returning its function as it is while active: a
    forward computes the same values with or without it, and the calls inside it then run eagerly, recorded like any
    other. Restored on exit."""
    import jax

    saved = jax.checkpoint, jax.remat

    def as_is(fun: Callable | None = None, *args: Any, **kwargs: Any) -> Any:
        return fun if fun is not None else (lambda f: f)

    jax.checkpoint = jax.remat = as_is
    try:
        yield
    finally:
        jax.checkpoint, jax.remat = saved
