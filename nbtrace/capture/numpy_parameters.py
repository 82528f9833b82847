"""The fingerprint of a weight held as a numpy array, without torch: the dict ``parameters.py`` writes.

A capture of another framework's weights (JAX/Flax) writes the sidecar's ``parameters`` section
where torch is not installed. The layout of a fingerprint (which numbers, in which order, how they
are written) lives here and ``parameters.py`` uses it too, so the two cannot drift apart; numpy is
imported only by ``fingerprint_array``, since a trace of a torch model needs torch alone.

Everything computed from values read exactly (shape, dtype, checksum, min, max, absmax, samples,
mirrored samples, exact dtypes) is torch's to the bit. torch sums float32 values in float32
accumulators, in an order of its own (its CPU kernels' vector width and threads, or the GPU's);
here sums are taken in float64 and rounded to float32 where torch's sum is a float32, so mean, std,
norm and the block norms equal torch's correctly rounded sums, which a float32 sum of many
values can miss by an ulp (at 7 significant digits: now and then the last digit).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

BLOCKS = 16
SAMPLES = 64
NARROWER = ("bfloat16", "float16", "float8_e4m3fn")
STATS = ("mean", "std", "min", "max", "absmax", "norm")
_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
_ITEMSIZE = {"bfloat16": 2, "float16": 2, "float8_e4m3fn": 1}

#: what the numbers of a fingerprint hold: how many row blocks, column blocks, samples and mirrored samples,
#: and the narrower dtypes whose flags follow them
Layout = tuple[int, int, int, int, tuple[str, ...]]


def sample_positions(numel: int, count: int = SAMPLES) -> list[int]:
    """``count`` fixed, spread-out flat positions of a tensor of ``numel`` elements (the same on every run)."""
    if numel <= count:
        return list(range(numel))
    golden = 0.6180339887498949
    return sorted({int(((k + 1) * golden % 1.0) * numel) for k in range(count)})


def block_bounds(size: int) -> list[int]:
    """Where the up to ``BLOCKS`` contiguous blocks of ``size`` rows (or columns) start, and the end."""
    count = min(BLOCKS, size)
    return [round(i * size / count) for i in range(count + 1)]


def json_number(value: float) -> float | str:
    """A float for JSON: ``"nan"``/``"inf"``/``"-inf"`` as text, others rounded to 7 significant digits."""
    if not math.isfinite(value):
        return str(value)
    return float(f"{value:.7g}")


def fill_fingerprint(fingerprint: dict[str, Any], numbers: list[float], check: int, layout: Layout) -> None:
    """Write a floating tensor's numbers into its fingerprint.

    ``numbers``: the ``STATS``, row-block norms, column-block norms, samples, mirrored samples, and for each
    narrower dtype of ``layout`` 1.0 when it holds every sample exactly; ``check``: the bit sum.
    """
    rows, cols, samples, mirrored, narrower = layout
    stats, take = numbers[: len(STATS)], numbers[len(STATS) :]
    fingerprint.update({name: json_number(v) for name, v in zip(STATS, stats)})
    fingerprint["checksum"] = f"{check & 0xFFFFFFFFFFFFFFFF:016x}"
    fingerprint["row_blocks"] = [json_number(v) for v in take[:rows]]
    fingerprint["col_blocks"] = [json_number(v) for v in take[rows : rows + cols]]
    at = rows + cols + samples
    fingerprint["samples"] = [json_number(v) for v in take[rows + cols : at]]
    if mirrored:
        fingerprint["mirrored_samples"] = [json_number(v) for v in take[at : at + mirrored]]
    exact = take[at + mirrored : at + mirrored + len(narrower)]
    fingerprint["exact_in"] = [name for name, flag in zip(narrower, exact) if flag]


def fingerprint_array(a: np.ndarray, kind: str = "parameter") -> dict[str, Any]:
    """The fingerprint ``parameters.py`` writes for a tensor of the array's values, shape and dtype.

    ``kind``: ``"parameter"`` or ``"buffer"``. Integer and bool arrays get kind, shape and dtype only.
    """
    import numpy as np

    from .numpy_print import torch_name

    a = np.asarray(a)
    name = torch_name(a)
    fingerprint: dict[str, Any] = {"kind": kind, "shape": list(a.shape), "dtype": name}
    if name in _FLOATS and a.size > 0:
        numbers, layout = _numbers(a)
        fill_fingerprint(fingerprint, numbers, _bit_sum(a), layout)
    return fingerprint


def _numbers(a: np.ndarray) -> tuple[list[float], Layout]:
    """``parameters._numbers`` of a floating array: the same vector, from float64 sums (module docstring)."""
    import numpy as np

    wide = np.dtype(np.float64) if a.dtype == np.float64 else np.dtype(np.float32)  # torch's sums: float32
    x = a.astype(wide) if a.dtype.itemsize < 4 else a  # 16-bit floats are summed as float32, as there
    flat = x.reshape(-1)
    numel = flat.size
    with np.errstate(all="ignore"):
        total = float(flat.sum(dtype=np.float64).astype(wide))
        squares = np.square(flat)  # rounded to float32 as torch's squares are
        if x.ndim >= 2:
            matrix = squares.reshape(x.shape[0], -1)
            row_norms = np.sqrt(_block_sums(matrix.sum(axis=1, dtype=np.float64).astype(wide)))
            col_norms = np.sqrt(_block_sums(matrix.sum(axis=0, dtype=np.float64).astype(wide)))
            square_sum = float(np.square(row_norms).sum())
        else:
            row_norms = col_norms = np.zeros(0)
            square_sum = float(squares.sum(dtype=np.float64).astype(wide))
        nan = bool(np.isnan(flat).any())
        low, high = (math.nan, math.nan) if nan else (float(flat.min()), float(flat.max()))
        mean = total / numel
        variance = (square_sum - numel * mean * mean) / max(numel - 1, 1)
        std = math.nan if numel <= 1 or math.isnan(variance) else math.sqrt(max(variance, 0.0))  # clamp(min=0)
        absmax = math.nan if nan else max(abs(low), abs(high))
        stats = [mean, std, low, high, absmax, math.sqrt(square_sum) if square_sum >= 0 else math.nan]
        index = np.array(sample_positions(numel), dtype=np.int64)
        values = a.reshape(-1)
        samples = values[index].astype(np.float64)
        mirrored = np.zeros(0)
        if a.ndim == 2 and min(a.shape) > 1:  # the transpose [C, R] at the same flat positions
            rows, cols = a.shape
            mirrored = values[(index % rows) * cols + index // rows].astype(np.float64)
        narrower = tuple(name for name in NARROWER if _ITEMSIZE[name] < a.dtype.itemsize)
        flags = [float(_exact_in(samples, name)) for name in narrower]
    numbers = [*stats, *row_norms.tolist(), *col_norms.tolist(), *samples.tolist(), *mirrored.tolist(), *flags]
    return numbers, (row_norms.size, col_norms.size, samples.size, mirrored.size, narrower)


def _block_sums(values: np.ndarray) -> np.ndarray:
    """Sums of up to BLOCKS contiguous blocks of a 1-D array, in float64 (as ``parameters._block_sums``)."""
    import numpy as np

    bounds = np.array(block_bounds(values.size), dtype=np.int64)
    cumulative = np.concatenate([np.zeros(1), np.cumsum(values.astype(np.float64))])
    return cumulative[bounds[1:]] - cumulative[bounds[:-1]]


def _exact_in(values: np.ndarray, name: str) -> bool:
    """True when every one of ``values`` (float64, exact) survives a round trip through dtype ``name``."""
    import ml_dtypes
    import numpy as np

    narrow = np.float16 if name == "float16" else getattr(ml_dtypes, name)
    return bool((values.astype(narrow).astype(np.float64) == values).all())


def _bit_sum(a: np.ndarray) -> int:
    """The wrapping sum of the array's bits as signed integers (unsigned bytes), as int64."""
    import numpy as np

    view = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    bits = np.ascontiguousarray(a).reshape(-1).view(view)
    return int(bits.sum(dtype=np.int64))
