"""The fast printer writes exactly the characters torch's printer writes."""

from __future__ import annotations

import math
import random

import pytest
import torch

from nbtrace.capture.printing import fast_printable, stat_reprs, tensor_text
from nbtrace.capture.serialize import format_print_options

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.uint8,
          torch.int8, torch.bool]


def random_tensor(rng: random.Random) -> torch.Tensor:
    ndim = rng.choice([0, 1, 1, 2, 2, 3, 3, 4])
    shape = [rng.choice([1, 2, 3, 5, 6, 7, 8, 13, 40, 300]) for _ in range(ndim)]
    while math.prod(shape) > 20_000:
        shape[rng.randrange(len(shape))] = 2
    dtype = rng.choice(DTYPES)
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    kind = rng.choice(["normal", "wide", "tiny", "huge", "ints", "zeros", "special", "mixed"])
    base = torch.randn(shape, generator=gen, dtype=torch.float64)
    if kind == "wide":
        base = base * torch.pow(10.0, torch.randint(-12, 12, shape, generator=gen).double())
    elif kind == "tiny":
        base = base * 1e-30
    elif kind == "huge":
        base = base * 1e30
    elif kind == "ints":
        base = torch.randint(-300, 300, shape, generator=gen).double()
    elif kind == "zeros":
        base = torch.zeros(shape, dtype=torch.float64)
        if base.numel() and rng.random() < 0.5:
            base.view(-1)[0] = -0.0
    elif kind in ("special", "mixed"):
        flat = base.view(-1)
        for i in range(flat.numel()):
            if kind == "special" or rng.random() < 0.2:
                flat[i] = rng.choice([math.nan, math.inf, -math.inf, 0.0, -0.0, flat[i].item()])
    if dtype == torch.bool:
        return base > 0
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        return base.nan_to_num(0, 0, 0).clamp(info.min, info.max).to(dtype)
    t = base.to(dtype)
    if rng.random() < 0.2 and t.dim() >= 2:
        t = t.transpose(0, -1)  # non-contiguous views print the same
    return t


OPTIONS = [
    {},
    {"precision": 2},
    {"precision": 7, "linewidth": 60},
    {"threshold": 20, "edgeitems": 2},
    {"threshold": 5, "edgeitems": 1, "linewidth": 200},
    {"linewidth": 30},
]


@pytest.mark.parametrize("options", OPTIONS, ids=[str(o) or "default" for o in OPTIONS])
@pytest.mark.parametrize("use_repr", [True, False])
def test_fast_printer_matches_torch_on_random_tensors(options, use_repr):
    rng = random.Random(hash((str(options), use_repr)) & 0xFFFF)
    saved = torch._tensor_str.get_printoptions()
    torch.set_printoptions(**options)
    try:
        with format_print_options(use_repr):
            checked = 0
            for _ in range(250):
                t = random_tensor(rng)
                expected = str(t)
                got = tensor_text(t)
                if t.numel() == 0:
                    assert got is None
                    continue
                assert got == expected, (t.dtype, tuple(t.shape), options)
                stats = stat_reprs(t)
                if t.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
                    want = {
                        "mean": repr(t.mean()),
                        "std": repr(t.std()) if t.numel() > 1 else None,
                        "min": repr(t.min()),
                        "max": repr(t.max()),
                    }
                    for name, text in want.items():
                        if text is not None:
                            assert stats[name] == text, (name, t.dtype, tuple(t.shape))
                else:
                    assert stats is None
                checked += 1
            assert checked > 150
    finally:
        torch.set_printoptions(**saved)


def test_std_of_one_element_prints_like_torch():
    with format_print_options(True):
        for dtype in (torch.float32, torch.bfloat16):
            t = torch.tensor([3.0], dtype=dtype)
            with pytest.warns(UserWarning):
                expected = repr(t.std())
            assert stat_reprs(t)["std"] == expected


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.ones(3, requires_grad=True),
        lambda: torch.nn.Parameter(torch.ones(3)),
        lambda: torch.ones(3).to_sparse(),
        lambda: torch.ones(3, dtype=torch.complex64),
        lambda: torch.empty(3, device="meta"),
        lambda: torch.zeros(0),
        lambda: torch.ones(2, dtype=torch.float8_e4m3fn),
    ],
    ids=["requires_grad", "parameter", "sparse", "complex", "meta", "empty", "float8"],
)
def test_unusual_tensors_are_left_to_torch(make):
    t = make()
    with format_print_options(True):
        assert tensor_text(t) is None
        assert stat_reprs(t) is None


def test_needs_the_formats_sci_mode():
    t = torch.ones(3)
    assert not fast_printable(t)  # default print options: torch decides sci mode itself
    with format_print_options(True):
        assert fast_printable(t)


@pytest.mark.parametrize("dtype", [getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n)])
def test_large_unsigned_tensors_print_like_torch(dtype):
    """torch has no index_select for these: the shown elements are gathered another way."""
    t = (torch.arange(3000).reshape(30, 100) * 7).to(dtype)
    if dtype == torch.uint64:
        t[0, 0] = torch.tensor(2**64 - 1, dtype=dtype)
    with format_print_options(True):
        assert tensor_text(t) == str(t)
