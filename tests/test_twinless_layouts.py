"""Two folders without a float64 twin, of two libraries that hold one tensor in two layouts (issue 36; issue 35's
"folders without a twin stay unresolved where a module's inputs agree and its output is off by millions of ulps").

timm's ConvNeXt built channels-first (``LayerNorm2d``, 1x1 convolutions on ``[N, C, H, W]``) against transformers'
ConvNext (``nn.LayerNorm`` and ``nn.Linear`` on ``[N, H, W, C]``), weights converted in code
(``tests/models/convnext_pair.py``), traced with full tensors and no twin (``measure_rounding=False``, as the drop-in
writes them). Full tensors of the same axes in another order are compared with b's read in a's layout
(``diff/measure/layouts.py``; where the two layouts have one shape, the first stage's ``[2, 16, 16, 16]``, the values
tell them apart), and the derived bounds read a norm over the channel axis, a convolution and an identity by what
they compute (``diff/verdict/operation_axes.py``): a bug is named at its leaf, a correct port agrees, at two seeds and
two widths.
"""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import nbtrace
from nbtrace.diff.measure.layouts import axis_order, closest, in_a_layout, orders
from tests.models import convnext_pair as r
from tests.models.modes import traced
from tests.models.precision import one_thread  # noqa: F401  (a module fixture: one torch thread)

FULL = dict(use_repr=False, do_prune_layers=False, measure_rounding=False)
#: the pair's own widths (the first stage's 16 channels of 16x16 pixels: one shape in both layouts), and others
WIDTHS = {"16": r.DIMS, "24": (24, 40, 56, 72)}


def test_b_is_read_in_a_layout_by_its_shapes_or_where_they_are_one_by_its_values():
    x = torch.randn(2, 48, 4, 6, dtype=torch.float64)
    assert axis_order(x.shape, (2, 4, 6, 48)) == (0, 3, 1, 2)
    assert torch.equal(in_a_layout(x, x.permute(0, 2, 3, 1).contiguous()), x)
    assert axis_order((2, 64, 2, 2), (2, 2, 2, 64)) == (0, 3, 1, 2) and axis_order((2, 16), (16, 2)) is None
    square = torch.randn(2, 16, 16, 16, dtype=torch.float64)
    assert len(orders(square.shape, square.shape)) == 6  # the three axes of 16 in every order
    assert torch.equal(closest(square, square.permute(0, 2, 3, 1).contiguous()), square)
    near = square + 1e-7 * torch.randn_like(square)
    assert torch.equal(closest(square, near), near)  # equal shapes whose values agree are read as they are
    assert torch.equal(in_a_layout(torch.ones(2, 5, 1, 1), torch.full((2, 5), 2.0)), torch.full((2, 5, 1, 1), 2.0))


@pytest.fixture(scope="module", params=[(0, "16"), (3, "24")], ids=["seed0-width16", "seed3-width24"])
def pair(request, tmp_path_factory):
    seed, width = request.param
    r.require_library("timm")
    saved = r.DIMS
    r.DIMS = WIDTHS[width]
    try:
        original = r.original(seed)
        folder = tmp_path_factory.mktemp(f"convnext{seed}")
        x = r.inputs(seed)
        reference = traced(original, (x,), folder / "reference", **FULL)
        yield original, x, reference, folder
    finally:
        r.DIMS = saved


def _compare(pair, bug, printed=False):
    original, x, reference, folder = pair
    saved = r.DIMS
    r.DIMS = tuple(s.shape[0] for s in (original.stages[k].blocks[0].norm.weight for k in range(4)))
    options = dict(measure_rounding=False) if printed else FULL
    try:
        return nbtrace.compare(reference, traced(r.port(original, bug), (x,), folder / f"port-{bug}", **options))
    finally:
        r.DIMS = saved


def _ulps(c) -> float:
    """How far the call a twinless comparison left open differs (its reason's "RMS, N u"); 0 where none is."""
    if c.unresolved is None:
        return 0.0
    return float(re.search(r"RMS, ([0-9.e+-]+) u of", c.unresolved[1]).group(1))


def test_a_correct_channels_last_port_agrees_with_its_channels_first_original(pair):
    """It agrees, or a call is left open by a model of rounding (a few units of float32), never millions of ulps
    (the permuted tensors compared element by element) and never named."""
    c = _compare(pair, None)
    assert c.verdict in ("agree", "unresolved") and _ulps(c) < 100, c.summary()


@pytest.mark.parametrize("bug", ["norm_eps", "gelu_tanh", "fc1_bias", "stem_norm_eps"])
def test_a_bug_is_named_at_its_leaf_through_the_other_layout(pair, bug):
    c = _compare(pair, bug)
    assert c.verdict == "diverge" and c.first_divergence.module_path == r.BUGS[bug], c.summary()
    top = c.first_divergence.evidence[0]
    assert top.test == ("weights" if bug == "fc1_bias" else "bound") and top.score >= 3
    if bug.endswith("norm_eps"):
        assert "LayerNorm over" in top.sentence and "axis 1" in top.sentence


def test_a_correct_bfloat16_port_agrees_and_a_converted_weight_is_named(tmp_path):
    r.require_library("timm")
    original = r.original(1, torch.bfloat16)
    x = r.inputs(1, torch.bfloat16)
    reference = traced(original, (x,), tmp_path / "reference", **FULL)
    clean = nbtrace.compare(reference, traced(r.port(original), (x,), tmp_path / "port", **FULL))
    assert clean.verdict == "agree", clean.summary()
    bias = nbtrace.compare(reference, traced(r.port(original, "fc1_bias"), (x,), tmp_path / "bias", **FULL))
    assert bias.first_divergence.module_path == r.BUGS["fc1_bias"]


class _NaiveBatchNorm(nn.BatchNorm2d):
    """A correct BatchNorm at eval written out: ``(x − μ)/√(v + eps)·g + b`` in the input's dtype, step by step."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (1, -1, 1, 1)
        return ((x - self.running_mean.reshape(shape)) / torch.sqrt(self.running_var.reshape(shape) + self.eps)
                * self.weight.reshape(shape) + self.bias.reshape(shape))


class _NaiveLayerNorm2d(nn.LayerNorm):
    """A correct channels-first LayerNorm written out over the channel axis, without a permutation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(1, keepdim=True)
        var = (x - mean).square().mean(1, keepdim=True)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight.reshape(1, -1, 1, 1) + self.bias.reshape(
            1, -1, 1, 1)


@pytest.mark.parametrize("printed", [False, True], ids=["full", "printed"])
@pytest.mark.parametrize("seed,dtype", [(2, torch.float32), (5, torch.bfloat16)])
def test_a_batch_norm_at_eval_is_read_by_what_it_computes(tmp_path, seed, dtype, printed):
    """timm's ResNet-18 against transformers' port: a correct port, and one whose norms compute the same function
    written out step by step, agree (or leave a few units open); a BatchNorm's eps of 1e-1, and a shortcut's, are
    named at the norm from full-tensor folders without a twin in float32 (in bfloat16 each moves its norm by about
    16 u, within what a correct bfloat16 BatchNorm may round: not provable without a twin). From printed folders
    (the defaults without the twin: the run's sketches) the block's norm is named; the shortcut's stage is pruned."""
    from tests.models import timm_resnet as rn

    options = dict(measure_rounding=False) if printed else FULL
    original = rn.original(seed, dtype)
    x = rn.inputs(seed, dtype)
    reference = traced(original, (x,), tmp_path / "reference", **options)
    naive = rn.port(original)
    for module in naive.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.__class__ = _NaiveBatchNorm
    for name, port in (("clean", rn.port(original)), ("naive", naive)):
        c = nbtrace.compare(reference, traced(port, (x,), tmp_path / name, **options))
        assert c.verdict in ("agree", "unresolved") and c.first_divergence is None, (name, c.summary())
        assert printed or _ulps(c) < 100, c.summary()
    bugs = ("bn_eps",) if printed else ("bn_eps", "shortcut_eps")
    for bug in bugs if dtype == torch.float32 else ():  # bfloat16: within its bound (16 u)
        c = nbtrace.compare(reference, traced(rn.port(original, bug), (x,), tmp_path / bug, **options))
        assert c.verdict == "diverge" and c.first_divergence.module_path == rn.BUGS[bug], c.summary()
        assert "BatchNorm (eval)" in c.first_divergence.evidence[0].sentence


def test_a_channels_first_norm_written_out_agrees(pair):
    """The original's every ``LayerNorm2d`` swapped for the same function written over the channel axis: a correct
    implementation of it, within the bound (the port compared with the original that is now the reference)."""
    original, x, reference, folder = pair
    from timm.layers import LayerNorm2d

    for module in original.modules():
        if isinstance(module, LayerNorm2d):
            module.__class__ = _NaiveLayerNorm2d
    try:
        c = nbtrace.compare(reference, traced(original, (x,), folder / "written-out", **FULL))
    finally:
        for module in original.modules():
            if isinstance(module, _NaiveLayerNorm2d):
                module.__class__ = LayerNorm2d
    assert c.verdict in ("agree", "unresolved") and _ulps(c) < 100, c.summary()


def test_printed_corners_of_two_layouts_are_compared_as_the_same_elements(pair):
    """Printed folders (the defaults without the twin): torch prints the first and last three of every axis, so the
    corners of ``[N, C, H, W]`` and ``[N, H, W, C]`` are the same elements; read in a's layout, the correct port's
    corners agree (they were 1.8 apart in the first stage, read as they are) and it agrees."""
    original, x, _, folder = pair
    reference = traced(original, (x,), folder / "printed-reference", measure_rounding=False)
    c = _compare((original, x, reference, folder / "printed"), None, printed=True)
    assert c.verdict == "agree", c.summary()
