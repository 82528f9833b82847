"""One tensor held in two layouts: channels first against channels last around a norm and the 1x1 projections of a
ConvNeXt block, heads before or after the sequence. The float64 twin's layout sums (``capture/twin/signs.py``,
``axis_signs``) compare the two whatever order each side holds its axes in, so a bug is named at the leaf where it
is born, not at the block around it, and a correct port of another house agrees.

The published pair: timm's ConvNeXt built channels-first (``conv_mlp=True``: ``LayerNorm2d`` and 1x1 convolutions
on ``(N, C, H, W)``) against transformers' ConvNext (``nn.LayerNorm`` and ``nn.Linear`` on ``(N, H, W, C)``), weights
converted in code (``tests/models/convnext_pair.py``). Its first stage holds 16 channels of 16x16 pixels: the two
layouts have one shape there, and only the values tell them apart.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import nbtrace
from nbtrace.capture.twin.fingerprint import fingerprint
from nbtrace.capture.twin.signs import AXIS_SUMS, WIDTH
from nbtrace.jax.fingerprint import fingerprint as numpy_fingerprint
from tests.models import convnext_pair as r
from tests.models.modes import every_mode, reference_folders, traced
from tests.models.precision import one_thread  # noqa: F401  (a module fixture: one torch thread)


@pytest.mark.parametrize("shape,order", [((2, 32, 8, 8), (0, 2, 3, 1)), ((2, 16, 16, 16), (0, 2, 3, 1)),
                                         ((3, 4, 7, 5), (0, 2, 1, 3)), ((1, 6, 9, 4, 5), (0, 1, 3, 2, 4))])
def test_the_layout_sums_are_the_same_for_any_order_of_the_axes(shape, order):
    """Permuted axes (sizes one aside): the same layout sums, in torch and in numpy; the flat-order sums differ; a
    tensor one element off has other layout sums, moved by about that element's change."""
    x = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(len(shape)))
    mine, theirs = fingerprint(x), fingerprint(x.permute(order).contiguous())
    assert mine.shape == (WIDTH + AXIS_SUMS,)
    assert torch.allclose(mine[WIDTH:], theirs[WIDTH:], rtol=0, atol=1e-12 * x.numel())
    assert not torch.allclose(mine[:16], theirs[:16])
    in_numpy = np.asarray(numpy_fingerprint(x.permute(order).numpy()))
    assert np.allclose(in_numpy[WIDTH:], theirs[WIDTH:].numpy(), rtol=0, atol=1e-12 * x.numel())
    moved = x.clone()
    moved.view(-1)[5] += 0.5
    change = (fingerprint(moved)[WIDTH:] - mine[WIDTH:]).abs()
    assert torch.allclose(change, torch.full_like(change, 0.5))


def test_a_vector_or_matrix_has_no_layout_sums():
    assert fingerprint(torch.randn(4, 1, 5)).shape == (WIDTH,)
    assert fingerprint(torch.randn(2, 3, 4), layout=False).shape == (WIDTH,)


@pytest.fixture(scope="module", params=[(0, "float32"), (1, "bfloat16")], ids=["seed0-fp32", "seed1-bf16"])
def case(request, tmp_path_factory):
    seed, dtype = request.param
    base = tmp_path_factory.mktemp(f"convnext{seed}")
    original, x = r.original(seed, getattr(torch, dtype)), r.inputs(seed, getattr(torch, dtype))
    return original, x, reference_folders(original, (x,), base), base


def test_the_correct_port_of_another_layout_agrees_in_every_mode(case):
    """Default folders, unpruned full-tensor folders, the folder against the live port, both live: agree (before
    the layout sums: "diverge" at the first block's norm, its channels-last input taken for other values)."""
    original, x, references, base = case
    for mode, c in every_mode(original, r.port(original), (x,), references, base / "clean", None).items():
        assert c.verdict == "agree", f"{mode}: {c.summary()}"


@pytest.mark.parametrize("bug", sorted(r.BUGS))
def test_a_bug_inside_the_other_layout_is_named_at_its_leaf(case, bug):
    """A norm's eps and GELU's tanh form between the channels-last projections, a projection's bias, the block's
    own layer scale (the block that holds only it in a one-block stage), the stem's norm: each named at its module
    from default folders."""
    original, x, (default, _), base = case
    c = nbtrace.compare(default, traced(r.port(original, bug), (x,), base / bug))
    found = c.first_divergence
    assert found is not None and found.module_path == r.BUGS[bug], c.summary()


@pytest.mark.parametrize("bug", ["norm_eps", "gelu_tanh"])
def test_a_bug_inside_the_other_layout_is_named_with_both_live(bug):
    original, x = r.original(2), r.inputs(2)
    c = nbtrace.compare(original, r.port(original, bug), inputs=x)
    found = c.first_divergence
    assert found is not None and found.module_path == r.BUGS[bug], c.summary()


class Heads(nn.Module):
    """Queries split into heads and scaled by a per-position rotation-like table: ``(B, H, T, D)`` as sdpa wants
    them (``heads_first``), or ``(B, T, H, D)`` as flash-attention's layout holds them."""

    def __init__(self, heads_first: bool, eps: float = 1e-6) -> None:
        super().__init__()
        self.heads_first, self.eps = heads_first, eps

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        out = q * torch.rsqrt(q.square().mean(-1, keepdim=True) + self.eps)
        return out.transpose(1, 2) if self.heads_first else out


class Attention(nn.Module):
    def __init__(self, heads_first: bool, eps: float = 1e-6, width: int = 48, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj, self.o_proj = nn.Linear(width, width), nn.Linear(width, width)
        self.q_norm = Heads(heads_first, eps)
        self.heads_first = heads_first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.heads, d // self.heads))
        if self.heads_first:
            q = q.transpose(1, 2)
        return self.o_proj(q.reshape(b, t, d).relu())


@pytest.mark.parametrize("seed", [0, 5])
def test_heads_before_or_after_the_sequence(tmp_path, seed):
    """A per-head norm returning ``(B, H, T, D)`` against one returning ``(B, T, H, D)``: the correct port agrees,
    its eps of 1e-1 is named at the norm, not at the attention around it."""
    torch.manual_seed(seed)
    original = Attention(heads_first=False).eval()
    x = torch.randn(2, 7, 48)
    a = traced(original, (x,), tmp_path / "a")
    for eps, where in ((1e-6, None), (1e-1, "Attention.q_norm")):
        port = Attention(heads_first=True, eps=eps).eval()
        port.load_state_dict(original.state_dict())
        c = nbtrace.compare(a, traced(port, (x,), tmp_path / f"b{eps}"))
        found = c.first_divergence
        assert (found.module_path if found else None) == where, c.summary()
