"""The torch-free printer of numpy arrays writes exactly what torch prints for the same values and dtype."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest
import torch

from nbtrace.capture.numpy_print import array_text, dtype_text, shape_text, stat_texts
from nbtrace.capture.print_text import TRACE_OPTIONS, Options
from nbtrace.capture.printing import stat_reprs
from nbtrace.capture.serialize import format_print_options

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = [np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64)]
INTS = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)]
DTYPES = [*FLOATS, *INTS, np.dtype(np.bool_)]
SHAPES = [(), (1,), (5,), (13,), (1001,), (1500,), (4, 7), (40, 300), (3, 5, 7), (2, 3, 4, 5), (3, 6, 8, 9), (1, 1, 1)]
KINDS = ["normal", "wide", "tiny", "huge", "ints", "zeros", "special", "mixed"]


def to_torch(a: np.ndarray) -> torch.Tensor:
    """The tensor of the array's values and dtype (bfloat16 through its bits: exact)."""
    if a.dtype == BF16:
        return torch.from_numpy(a.copy(order="C").view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a.copy(order="C"))  # ascontiguousarray makes 0-d arrays 1-d


def random_array(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...], kind: str) -> np.ndarray:
    base = rng.standard_normal(shape)
    if kind == "wide":
        base = base * 10.0 ** rng.integers(-12, 12, shape)
    elif kind == "tiny":
        base = base * 1e-30
    elif kind == "huge":
        base = base * 1e30
    elif kind == "ints":
        base = rng.integers(-300, 300, shape).astype(np.float64)
    elif kind == "zeros":
        base = np.zeros(shape)
        if base.size and rng.random() < 0.5:
            base.reshape(-1)[0] = -0.0
    elif kind in ("special", "mixed"):
        flat = base.reshape(-1)
        pick = rng.random(flat.size) < (1.0 if kind == "special" else 0.2)
        flat[pick] = rng.choice([math.nan, math.inf, -math.inf, 0.0, -0.0, 1.5], int(pick.sum()))
        base = flat.reshape(shape)
    base = np.asarray(base, np.float64)
    if dtype == np.bool_:
        return np.asarray(base > 0)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        low, high = max(info.min, -(2**62)), min(info.max, 2**62)  # bounds that float64 holds
        out = np.asarray(np.clip(np.nan_to_num(base, nan=0, posinf=0, neginf=0), low, high).astype(dtype))
        if out.size and rng.random() < 0.3:  # the widest values of the dtype
            out.reshape(-1)[rng.integers(out.size)] = info.min if rng.random() < 0.5 else info.max
        return out
    with np.errstate(over="ignore"):
        return np.asarray(base.astype(np.float32).astype(dtype) if dtype == BF16 else base.astype(dtype))


def cases(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for i in range(count):
        dtype = DTYPES[i % len(DTYPES)]
        yield random_array(rng, dtype, SHAPES[rng.integers(len(SHAPES))], KINDS[rng.integers(len(KINDS))])


@pytest.mark.parametrize("seed", range(6))
def test_array_text_is_torchs_printout(seed):
    checked = 0
    with format_print_options(True):
        for a in cases(seed, 130):
            assert array_text(a) == str(to_torch(a)), (a.dtype, a.shape)
            checked += 1
    assert checked == 130


def test_every_dtype_shape_and_kind_prints_as_torch_does():
    rng = np.random.default_rng(7)
    with format_print_options(True):
        for dtype in DTYPES:
            for shape in SHAPES:
                for kind in KINDS:
                    a = random_array(rng, dtype, shape, kind)
                    assert array_text(a) == str(to_torch(a)), (dtype, shape, kind)


@pytest.mark.parametrize("shape", [(0,), (0, 3), (2, 0, 4)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_empty_arrays(shape, dtype):
    a = np.zeros(shape, dtype)
    with format_print_options(True):
        assert array_text(a) == str(to_torch(a))
    assert stat_texts(a) is None


def test_non_contiguous_arrays_print_their_values():
    a = np.random.default_rng(3).standard_normal((30, 50, 4)).astype(np.float32)
    with format_print_options(True):
        for view in (a.transpose(2, 0, 1), a[::2, ::-3], a[:, 7, :], np.asfortranarray(a)):
            assert array_text(view) == str(torch.from_numpy(np.ascontiguousarray(view)))


OPTIONS = [{"precision": 2}, {"precision": 7, "linewidth": 60}, {"threshold": 20, "edgeitems": 2},
           {"threshold": 5, "edgeitems": 1, "linewidth": 200}, {"linewidth": 30}]


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_other_print_options(options):
    saved = torch._tensor_str.get_printoptions()
    torch.set_printoptions(**options)
    try:
        with format_print_options(True):
            opts = torch._tensor_str.PRINT_OPTS
            mine = Options(opts.precision, opts.linewidth, opts.edgeitems, opts.threshold)
            for a in cases(11, 80):
                assert array_text(a, mine) == str(to_torch(a)), (a.dtype, a.shape)
    finally:
        torch.set_printoptions(**saved)


def test_trace_options_are_torchs_defaults_in_a_trace():
    with format_print_options(True):
        opts = torch._tensor_str.PRINT_OPTS
        assert TRACE_OPTIONS == Options(opts.precision, opts.linewidth, opts.edgeitems, opts.threshold)


def test_dtype_and_shape_texts():
    for dtype in DTYPES:
        for shape in [(), (3,), (2, 3), (0, 4), (1, 2, 3, 4)]:
            a = np.zeros(shape, dtype)
            assert dtype_text(a) == repr(to_torch(a).dtype)
            assert shape_text(a) == repr(to_torch(a).shape)
    with pytest.raises(TypeError):
        dtype_text(np.zeros(2, np.complex64))


def _zero_tie(a: np.ndarray, extreme: float) -> bool:
    """An extreme that is 0 with both signed zeros present: torch's pick between them depends on its SIMD lanes."""
    zeros = np.signbit(a.astype(np.float64)[a.astype(np.float64) == 0])
    return extreme == 0 and zeros.any() and not zeros.all()


def test_stat_texts_min_max_are_torchs_and_mean_std_nearly_always():
    matched = total = 0
    with format_print_options(True):
        for seed in range(4):
            for a in cases(100 + seed, 400):
                got = stat_texts(a)
                if a.dtype not in FLOATS[:3]:
                    assert got is None
                    continue
                want = stat_reprs(to_torch(a))
                assert want is not None and got is not None
                for key in ("min", "max"):
                    extreme = float(getattr(np, key)(a.astype(np.float64)))
                    if _zero_tie(a, extreme):
                        assert got[key].replace("-0.", "0.") == want[key].replace("-0.", "0."), (a, key)
                    else:
                        assert got[key] == want[key], (a.dtype, a.shape, key)
                matched += (got["mean"] == want["mean"]) + (got["std"] == want["std"])
                total += 2
    assert total > 500 and matched / total > 0.97, f"{matched}/{total}"


@pytest.mark.parametrize("dtype", FLOATS[:3], ids=str)
def test_stat_texts_of_weight_like_arrays(dtype):
    """mean and std of float32 and 16-bit arrays: torch's text in (nearly) every case; min and max always."""
    rng = np.random.default_rng(5)
    matched = 0
    with format_print_options(True):
        for i in range(150):
            n = int(rng.choice([1, 2, 7, 300, 1000, 4096, 30000]))
            values = rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3) + rng.choice([0.0, rng.uniform(-5, 5)])
            a = to_dtype(values, dtype)
            got, want = stat_texts(a), stat_reprs(to_torch(a))
            assert (got["min"], got["max"]) == (want["min"], want["max"])
            matched += got == want
    assert matched >= (145 if dtype == np.float32 else 150), matched


def to_dtype(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return values.astype(np.float32).astype(dtype) if dtype == BF16 else values.astype(dtype)


def test_stat_texts_of_one_element_and_specials():
    with format_print_options(True):
        for values in ([2.5], [math.nan, 1.0], [math.inf, 1.0], [math.inf, -math.inf], [0.0, 0.0], [-1e-30, 1e-30]):
            for dtype in FLOATS[:3]:
                a = to_dtype(np.array(values), dtype)
                assert stat_texts(a) == stat_reprs(to_torch(a)), (values, dtype)


def test_modules_import_without_torch():
    script = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # any import of torch now fails
        import numpy as np, ml_dtypes
        from nbtrace.capture import numpy_print, print_text
        a = np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16)
        print(numpy_print.array_text(a))
        print(numpy_print.stat_texts(a)["mean"])
        assert "torch" not in [name for name, module in sys.modules.items() if module is not None]
        """
    )
    result = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "tensor([[0.0000e+00, 1.0000e+00, 2.0000e+00],",
        "        [3.0000e+00, 4.0000e+00, 5.0000e+00]], dtype=torch.bfloat16)",
        "tensor(2.5000e+00, dtype=torch.bfloat16)",
    ]
