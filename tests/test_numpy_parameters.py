"""The torch-free fingerprint of a numpy array is the one ``parameters.py`` writes for the same tensor.

Everything read from the values exactly is equal to the bit. torch sums float32 values in float32 in an
order of its own (on CPU it changes with the thread count), so mean, std, norm and the block norms equal
torch's exactly where the sums are exact (small integers, dyadic values) and within float32 rounding
elsewhere.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest
import torch
from torch import nn

from nbtrace.capture.numpy_parameters import BLOCKS, SAMPLES, fingerprint_array, sample_positions
from nbtrace.capture.parameters import ParameterFingerprints

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = [np.dtype(np.float32), BF16, np.dtype(np.float16), np.dtype(np.float64)]
SHAPES = [(), (1,), (7,), (SAMPLES,), (5000,), (3, 1), (1, 9), (2, 2), (8, 8), (64, 64), (300, 200), (17, 2000),
          (17, 3, 5, 5), (64, 32, 3, 3), (2, 3, 4, 5, 6)]
EXACT_KEYS = ("kind", "shape", "dtype", "checksum", "min", "max", "absmax", "samples", "mirrored_samples",
              "exact_in")
SUMMED_KEYS = ("mean", "std", "norm", "row_blocks", "col_blocks")


def to_torch(a: np.ndarray) -> torch.Tensor:
    if a.dtype == BF16:
        return torch.from_numpy(a.copy(order="C").view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a.copy(order="C"))


def torch_fingerprint(a: np.ndarray, kind: str = "parameter") -> dict:
    module = nn.Module()
    tensor = to_torch(a)
    if kind == "parameter":
        module.weight = nn.Parameter(tensor, requires_grad=False)
    else:
        module.register_buffer("weight", tensor)
    return ParameterFingerprints(module, "M").section()["M"]["weight"]


def cast(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(values.astype(np.float32).astype(dtype) if dtype == BF16 else values.astype(dtype))


def weights(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    values = rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 1)
    if rng.random() < 0.3:
        values = values + rng.uniform(-1, 1) * np.abs(values).max()  # an offset: a mean of its own
    return cast(np.asarray(values), dtype)


def close(got, want, tolerance: float) -> bool:
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(close, got, want, [tolerance] * len(got)))
    if isinstance(want, str) or isinstance(got, str):
        return got == want
    return abs(got - want) <= tolerance * max(abs(want), 1e-300)


def check_summed(got: dict, want: dict, a: np.ndarray) -> None:
    """The summed numbers agree to float32 rounding (and 7-digit writing): mean to the values' scale, the
    variance to their mean square, norms and block norms relatively."""
    rms = want["norm"] / math.sqrt(a.size) if isinstance(want["norm"], float) else 1.0
    assert abs(got["mean"] - want["mean"]) <= 2e-6 * max(abs(want["mean"]), rms), (got["mean"], want["mean"])
    if isinstance(want["std"], float):
        assert abs(got["std"] ** 2 - want["std"] ** 2) <= 4e-6 * rms**2 + 2e-6 * want["std"] ** 2
    else:
        assert got["std"] == want["std"]
    for key in ("norm", "row_blocks", "col_blocks"):
        assert close(got[key], want[key], 3e-6), key


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_random_weights(dtype, seed):
    rng = np.random.default_rng(seed)
    whole = 0
    for shape in SHAPES:
        a = weights(rng, shape, dtype)
        got, want = fingerprint_array(a), torch_fingerprint(a)
        assert list(got) == list(want), shape  # the same keys, in the same order
        for key in EXACT_KEYS:
            assert got.get(key) == want.get(key), (shape, key)
        check_summed(got, want, a)
        whole += got == want
    if dtype == np.float64:  # float64 sums: torch's and numpy's orders agree to 7 digits
        assert whole == len(SHAPES)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_the_whole_fingerprint_is_torchs_where_sums_are_exact(dtype, seed):
    """Small integers and dyadic values: every float32 partial sum is exact, in any order."""
    rng = np.random.default_rng(10 + seed)
    for shape in SHAPES:
        scale = 2.0 ** int(rng.integers(-6, 4))
        a = cast(rng.integers(-8, 9, shape) * scale, dtype)
        assert fingerprint_array(a) == torch_fingerprint(a), shape


def test_sizes_above_the_sample_and_block_limits():
    rng = np.random.default_rng(3)
    for shape in [(BLOCKS + 1, 3), (3, BLOCKS + 1), (BLOCKS * 4 + 3, BLOCKS * 2 + 5), (SAMPLES + 1,),
                  (SAMPLES * 50 + 7,), (1000, 4096), (BLOCKS - 1, BLOCKS - 1)]:
        a = cast(rng.integers(-5, 6, shape) / 4.0, np.dtype(np.float32))
        got, want = fingerprint_array(a), torch_fingerprint(a)
        assert got == want, shape
        assert len(got["samples"]) == len(sample_positions(a.size))
        assert len(got["row_blocks"]) == min(BLOCKS, shape[0]) if len(shape) > 1 else not got["row_blocks"]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_special_values(dtype):
    rng = np.random.default_rng(4)
    for special in ([math.nan], [math.inf], [-math.inf], [math.inf, -math.inf], [0.0, -0.0], [1e-40, 7e-45],
                    [65504.0, 70000.0], [448.0, 0.001953125]):
        for shape in [(9,), (20, 6), (1,)]:
            a = rng.integers(-3, 4, shape).astype(np.float64)
            a.reshape(-1)[rng.choice(a.size, min(a.size, len(special)), replace=False)] = special[: a.size]
            a = cast(a, dtype)
            got, want = fingerprint_array(a), torch_fingerprint(a)
            assert got == want, (special, shape)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int16, np.int8, np.uint8, np.bool_], ids=str)
def test_integer_buffers(dtype):
    rng = np.random.default_rng(5)
    for shape in [(), (4,), (3, 5), (2, 0), (7, 2, 3)]:
        a = np.asarray(rng.integers(0, 100, shape).astype(dtype))
        assert fingerprint_array(a, "buffer") == torch_fingerprint(a, "buffer")
        assert set(fingerprint_array(a)) == {"kind", "shape", "dtype"}


def test_empty_and_non_contiguous_arrays():
    a = np.zeros((0, 4), np.float32)
    assert fingerprint_array(a) == torch_fingerprint(a) == {"kind": "parameter", "shape": [0, 4], "dtype": "float32"}
    b = (np.random.default_rng(6).integers(-4, 5, (20, 30)) / 8).astype(np.float32)
    for view in (b.T, b[::2, ::-3], np.asfortranarray(b)):
        assert fingerprint_array(view) == torch_fingerprint(np.ascontiguousarray(view))


def test_import_without_torch():
    script = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # any import of torch now fails
        import numpy as np
        from nbtrace.capture.numpy_parameters import fingerprint_array
        print(fingerprint_array(np.arange(6, dtype=np.float32).reshape(2, 3))["checksum"])
        """
    )
    result = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    expected = torch_fingerprint(np.arange(6, dtype=np.float32).reshape(2, 3))["checksum"]
    assert result.stdout.strip() == expected
