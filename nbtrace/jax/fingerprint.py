"""The twin's fingerprint of an array, in numpy: the same numbers as ``capture/twin/fingerprint.py`` computes for a
torch tensor of the same values (the signs and constants are shared: ``capture/twin/signs.py``), so a JAX trace's
twin compares with a PyTorch one's."""

from __future__ import annotations

import numpy as np

from ..capture.twin.signs import (AXIS_SUMS, CHUNK, SEED_S, SENTINEL, SUMS, axis_shape, axis_signs, chunk_signs,
                                 sign_sequence, valid_shape)

_S = np.asarray(sign_sequence(SEED_S, CHUNK), dtype=np.float64)
_W: list[np.ndarray] = [np.zeros(0)]
_AXES: dict[int, np.ndarray] = {}


def _chunk_signs(chunks: int) -> np.ndarray:
    if _W[0].shape[0] < chunks:
        _W[0] = np.asarray(chunk_signs(chunks), dtype=np.float64)
    return _W[0]


def valid_elements(x: np.ndarray, valid: np.ndarray | None) -> np.ndarray | None:
    """``valid`` (``[batch, seq]``) broadcast over ``x`` (``signs.valid_shape``, the PyTorch capture's rule)."""
    shape = valid_shape(x.shape, valid.shape) if valid is not None else None
    return None if shape is None else valid.reshape(shape)


def fingerprint(x: np.ndarray, valid: np.ndarray | None = None) -> list[float]:
    """The 16 sums, the count kept, their sum of squares and the count left out (``signs.WIDTH`` numbers), then the
    layout sums of an array of three or more axes longer than one."""
    x = np.asarray(x)
    if np.iscomplexobj(x):
        x = np.stack([x.real, x.imag], axis=-1)
    x = x.astype(np.float64)
    keep = valid_elements(x, valid)
    with np.errstate(invalid="ignore"):
        ok = x > -SENTINEL
    if keep is not None:
        ok = ok & keep
        counted = float(keep.sum()) * (x.size // keep.size)
    else:
        counted = float(x.size)
    values = np.where(ok, x, 0.0).reshape(-1)
    kept = float(ok.sum())
    full, rest = divmod(values.size, CHUNK)
    w = _chunk_signs(full + 1)
    folded = np.zeros(CHUNK, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        if full:
            folded += w[:full] @ values[: full * CHUNK].reshape(full, CHUNK)
        if rest:
            folded[:rest] += w[full] * values[full * CHUNK:]
        sums = (folded * _S).reshape(-1, SUMS).sum(0)
        square = float(np.dot(values, values))
        axes = axis_shape(x.shape)
        layout = [] if axes is None else [float(v) for v in _layout_sums(values, axes)]
    return [float(v) for v in sums] + [kept, square, counted - kept] + layout


def _layout_sums(values: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """``capture/twin/fingerprint.layout_sums`` in numpy."""
    def signs(size: int) -> np.ndarray:
        if size not in _AXES:
            _AXES[size] = np.asarray(axis_signs(size), dtype=np.float64).reshape(size, AXIS_SUMS)
        return _AXES[size]

    found = values.reshape(-1, axes[-1]) @ signs(axes[-1])
    for size in reversed(axes[:-1]):
        found = (found.reshape(-1, size, AXIS_SUMS) * signs(size)).sum(1)
    return found.reshape(AXIS_SUMS)
