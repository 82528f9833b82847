"""The zoo's awkward models: in-place writes, odd inputs and outputs, printer edge cases, patched forwards."""

from __future__ import annotations

import torch
from torch import nn

from .zoo_plain import _Inner


class _AddOneInPlace(nn.Module):
    def forward(self, x):
        return x.add_(1.0)  # mutates its input


class InplaceNet(nn.Module):
    """In-place ops: ReLU(inplace=True), a leaf that mutates its input, and the parent mutating a child's
    output afterwards. A tracer must record each tensor as it was at that moment (transformers serializes
    inputs before the call and outputs right after it)."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.relu = nn.ReLU(inplace=True)
        self.bump = _AddOneInPlace()
        self.out = nn.Linear(d, d)

    def forward(self, x):
        h = self.lin(x)
        h.mul_(3.0)  # changes lin's recorded output if it were read later
        h = self.relu(h)
        h = self.bump(h)
        h.sub_(0.5)
        x.mul_(2.0)  # the caller's input tensor too (the test builds fresh inputs per run)
        return self.out(h)


class _Const(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.table = nn.Parameter(torch.randn(3, d))

    def forward(self):
        return self.table  # a Parameter ("Parameter containing:" in its repr)


class _Nothing(nn.Module):
    def forward(self, x, cfg=None):
        return None


class _Describe(nn.Module):
    def forward(self, x, label="", opts=None):
        return f"{label}:{tuple(x.shape)}", len(opts or {}), 1.5


class _Casts(nn.Module):
    def forward(self, x):
        return {
            "f64": x.double() / 3,  # no stats for float64 in the format
            "u8": (x.abs() * 10).to(torch.uint8),
            "i8": (x * 10).to(torch.int8),
            "half": x.half(),
            "bf16": x.bfloat16(),
            "cplx_abs": torch.view_as_real(torch.complex(x, -x)),
        }


class OddIONet(nn.Module):
    """A module called with no arguments that returns a Parameter, one that returns None, one that returns a
    str/int/float tuple, a dict kwarg, a unicode/quote-laden str kwarg, and float64/uint8/int8/half/bf16
    tensors inside a float32 model."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.const = _Const(d)
        self.nothing = _Nothing()
        self.describe = _Describe()
        self.casts = _Casts()

    def forward(self, x, label='naïve ✓ "quoted" \\ tab\t\n'):
        t = self.const()
        self.nothing(x, cfg={"k": torch.ones(2), "n": 3, "nested": {"s": "x", "l": [1, None]}})
        desc = self.describe(x, label=label, opts={"a": 1})
        c = self.casts(x @ t.T)
        return c["f64"].float().sum(-1) + len(desc[0])


class _PrinterTorture(nn.Module):
    """Returns tensors chosen to hit every branch of torch's tensor printer (which nbtrace may reimplement):
    integer-valued floats, mixed magnitudes, +-0/nan/inf, huge/tiny, summarization (1-D, 2-D, 3-D, ints),
    wide rows that wrap at 120 columns, every common dtype, complex, channels_last, 0-d of each dtype."""

    def forward(self, x):
        g = torch.Generator().manual_seed(1234)
        out = {
            "int_valued": torch.tensor([1.0, 2.0, -3.0, 100.0]),
            "halves": torch.tensor([0.5, -0.25, 0.125]),
            "specials": torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1.0]),
            "all_nan": torch.full((2, 2), float("nan")),
            "huge_tiny": torch.tensor([1e30, -1e-30, 3.4e38, 1.2e-38, 5e-45]),
            "mixed_mag": torch.tensor([[1e-8, 1.0, 1e8], [-123456.789, 0.001, 42.0]]),
            "wide_row": torch.randn(3, 23, generator=g) * 1000,
            "long_1d": torch.arange(1500, dtype=torch.float32) - 700.5,
            "summ_2d": torch.randn(40, 40, generator=g),
            "summ_3d": torch.randn(12, 11, 10, generator=g) * 1e-5,
            "summ_int": torch.randint(-10**6, 10**6, (1100,), generator=g),
            "int64_big": torch.tensor([2**62, -2**62, 0, 7]),
            "int32": torch.tensor([[1, -2], [300, 4]], dtype=torch.int32),
            "int16": torch.tensor([-32768, 32767], dtype=torch.int16),
            "uint8": torch.tensor([0, 255, 17], dtype=torch.uint8),
            "bool_2d": torch.randn(3, 5, generator=g) > 0,
            "f64": torch.randn(2, 3, generator=g, dtype=torch.float64) * 1e100,
            "f16": (torch.randn(2, 6, generator=g) * 1000).half(),
            "f16_ext": torch.tensor([65504.0, 6e-8, -0.0, float("inf")], dtype=torch.float16),
            "bf16": (torch.randn(2, 6, generator=g) * 1e20).bfloat16(),
            "bf16_ints": torch.tensor([1.0, 256.0, 257.0, -3.0], dtype=torch.bfloat16),
            "complex": torch.complex(torch.randn(3, generator=g), torch.randn(3, generator=g)),
            "channels_last": torch.randn(1, 3, 2, 2, generator=g).to(memory_format=torch.channels_last),
            "strided": torch.randn(4, 6, generator=g)[::2, 1::2],
            "expanded": torch.randn(1, 3, generator=g).expand(4, 3),
            "zero_d_f32": torch.tensor(3.0),
            "zero_d_f16": torch.tensor(-0.5, dtype=torch.float16),
            "zero_d_i64": torch.tensor(-7),
            "zero_d_bool": torch.tensor(True),
            "one_elem_nan": torch.tensor([float("nan")]),
            "same_tensor_twice": x,
            "same_again": x,
            "x_view": x[0],
        }
        return out


class PrinterTortureNet(nn.Module):
    """See _PrinterTorture; also dict outputs with non-str keys and str arguments with emoji, control and
    non-BMP characters (json's ensure_ascii escaping)."""

    def __init__(self):
        super().__init__()
        self.torture = _PrinterTorture()
        self.keys = _OddKeys()

    def forward(self, x, note="emoji 😀 ctrl \x01\x1f\x7f\b\f\r é ß \u2028 end"):
        out = self.torture(x)
        k = self.keys(x, note=note)
        return out["int_valued"].sum() + x.sum() + k[0].sum()


class _OddKeys(nn.Module):
    def forward(self, x, note=""):
        return {0: x, 2.5: x * 2, None: x + 1, True: "yes", "ключ": x - 1, "emoji😀": note}


class _PassThrough(nn.Module):
    def forward(self, x):
        return x


class InplaceDataNet(nn.Module):
    """The same tensor object flows through several modules while its data changes in ways that do NOT bump
    its version counter (``.data`` writes, a copy through a second view's ``.data``). An implementation that
    reuses an earlier file for an "unchanged" tensor must still record each call's actual values."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.first = _PassThrough()
        self.second = _PassThrough()
        self.third = _PassThrough()
        self.out = nn.Linear(d, d)

    def forward(self, x):
        h = self.lin(x)
        self.first(h)
        h.data.mul_(2.0)  # h._version unchanged
        self.second(h)
        h[0].data.add_(1.0)  # through a view's .data: still no version bump on h
        self.third(h)
        return self.out(h)


class _Scale(nn.Module):
    def forward(self, t, k):
        return t * k


class IdReuseNet(nn.Module):
    """Many short-lived tensors in a loop: CPython reuses the id() (and the allocator the storage) of freed
    tensors, so an implementation keying anything on id() or data_ptr() without holding a reference mixes
    calls up."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.scale = _Scale()
        self.probe = _PassThrough()

    def forward(self, x):
        acc = x.new_zeros(())
        for i in range(6):
            t = x * (i + 1)  # the previous t is freed here
            u = self.scale(t, float(i))
            acc = acc + self.probe(u).sum()
            del t, u
        return acc


class PatchedForwardNet(nn.Module):
    """A submodule whose forward was replaced on the instance (as accelerate's hooks or a user's monkeypatch
    do): both tracers must call the patched forward, and leave that same function in place afterwards."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.inner = _Inner(d)
        self.head = nn.Linear(d, 2)
        orig = self.inner.forward

        def patched(x):
            return orig(x) * 10.0

        self.inner.forward = patched

    def forward(self, x):
        return self.head(self.inner(x))
