"""A classic CNN of another library's house: timm's ResNet-18 against transformers' ResNet port of it, weights
converted in code by names (``tests/models/timm_resnet.py``). The port wraps each convolution, norm and activation
in a module of its own, numbers its stages from 0 where timm names them ``layer1…layer4``, runs a block's shortcut
before its main branch, and its stage list is what layer pruning thins. On every path a user takes (default folders,
unpruned folders, a folder against the live port, both live), float32 and bfloat16, two seeds: the leaves align
call for call, the correct port agrees, and each planted bug is named at its module."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import nbtrace
from tests.models import timm_resnet as r
from tests.models.modes import every_mode, reference_folders, traced
from tests.models.precision import one_thread  # noqa: F401  (a module fixture: one torch thread)


@pytest.fixture(scope="module", params=[(0, "float32"), (1, "bfloat16")], ids=["seed0-fp32", "seed1-bf16"])
def case(request, tmp_path_factory):
    seed, dtype = request.param
    base = tmp_path_factory.mktemp(f"resnet{seed}")
    original, x = r.original(seed, getattr(torch, dtype)), r.inputs(seed, getattr(torch, dtype))
    return original, x, reference_folders(original, (x,), base), base


def test_the_correct_port_agrees_in_every_mode(case):
    """Its logits equal the original's bit for bit. Default folders (the port's stage list pruned, timm's stages
    not), unpruned full-tensor folders, the folder against the live port, both live: agree, no weight listed as
    differing, nearly every call aligned."""
    original, x, references, base = case
    port = r.port(original)
    with torch.no_grad():
        assert torch.equal(original(x), port(x).logits)
    for mode, c in every_mode(original, port, (x,), references, base / "clean", None).items():
        assert c.verdict == "agree", f"{mode}: {c.summary()}"
        assert not c.weights, f"{mode}: {c.weights}"
        assert c.coverage > 0.95, f"{mode}: {c.coverage}"


@pytest.mark.parametrize("bug", sorted(r.BUGS))
def test_a_bug_is_named_at_its_module(case, bug):
    """From default folders each bug is named at the original's module where it is born: a norm's eps at that
    norm, a kernel's height and width swapped at that convolution, the ReLU after the residual add at its block
    (its own code), train mode at the first norm, a max-pool without its padding at the pool (its inputs agree, its
    output has another shape, and every call after it still pairs with its counterpart), a shortcut norm's eps in a
    stage the port's files pruned at timm's downsample norm (the port's float64 twin kept the stage)."""
    original, x, (default, _), base = case
    c = nbtrace.compare(default, traced(r.port(original, bug), (x,), base / bug))
    found = c.first_divergence
    assert found is not None and found.module_path == r.BUGS[bug], c.summary()


@pytest.mark.parametrize("bug", ["conv_hw", "pool_padding"])
def test_a_bug_is_named_with_both_modules_live(bug):
    original, x = r.original(2), r.inputs(2)
    c = nbtrace.compare(original, r.port(original, bug), inputs=x)
    found = c.first_divergence
    assert found is not None and found.module_path == r.BUGS[bug], c.summary()


def test_the_leaves_align_call_for_call_across_the_houses(case):
    """Each convolution, norm and activation of timm pairs with the one inside the port's ConvLayer wrapper; timm's
    downsample (run after the main branch) with the port's shortcut (run before it), never with the same-shaped
    3x3 convolution of its block; stage containers with stage containers; unpruned, only timm's global pooling
    wrapper is left without a counterpart."""
    original, x, (_, full), base = case
    c = nbtrace.compare(full, traced(r.port(original), (x,), base / "aligned", use_repr=False, do_prune_layers=False))
    paired = {a.module_path: b.module_path for a, b in c.alignment.pairs}
    stage = f"{r.PORT}.resnet.encoder.stages.1.layers.0"
    assert paired[f"{r.ROOT}.layer2.0.conv1"] == f"{stage}.layer.0.convolution"
    assert paired[f"{r.ROOT}.layer2.0.downsample.0"] == f"{stage}.shortcut.convolution"
    assert paired[f"{r.ROOT}.layer2.0.downsample"] == f"{stage}.shortcut"
    assert paired[f"{r.ROOT}.layer2.0"] == stage
    assert paired[f"{r.ROOT}.layer3"] == f"{r.PORT}.resnet.encoder.stages.2"
    assert paired[f"{r.ROOT}.bn1"] == f"{r.PORT}.resnet.embedder.embedder.normalization"
    assert [n.module_path for n in c.unmatched_a] == [f"{r.ROOT}.global_pool"]


def test_layer_pruning_of_one_side_sets_aside_the_other_sides_counterparts(case):
    """The port's default folder holds stages 0 and 3 only (its stage list is pruned), timm's all four: timm's
    layer2 and layer3 are set aside as what the port's files do not hold, not counted as unaligned."""
    original, x, (default, _), base = case
    c = nbtrace.compare(default, traced(r.port(original), (x,), base / "pruned"))
    set_aside = {n.module_path for n in c.alignment.pruned_a}
    assert {f"{r.ROOT}.layer2", f"{r.ROOT}.layer3.1.conv2"} <= set_aside
    assert not any(path.startswith((f"{r.ROOT}.layer1", f"{r.ROOT}.layer4")) for path in set_aside)
    assert c.verdict == "agree" and c.coverage > 0.95, c.summary()


class _Stem(nn.Module):
    """A convolution, a norm and an activation that works in place (as timm's ``ReLU(inplace=True)``)."""

    def __init__(self, inplace: bool) -> None:
        super().__init__()
        self.conv, self.bn, self.act = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=inplace)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.bn(self.conv(x))))


def test_an_activation_in_place_is_seen_by_the_float64_twin(tmp_path):
    """The twin fingerprints what a tensor holds when a call hands it on: a ReLU in place changes the norm's output
    it received, and its own output is the changed tensor (a twin that remembered the tensor's first fingerprint
    saw the ReLU hand on its input unchanged, and the port's ReLU, not in place, diverge from it)."""
    torch.manual_seed(0)
    original, port = _Stem(inplace=True).eval(), _Stem(inplace=False).eval()
    port.load_state_dict(original.state_dict())
    x = torch.randn(2, 3, 8, 8)
    c = nbtrace.compare(traced(original, (x,), tmp_path / "a"), traced(port, (x,), tmp_path / "b"))
    assert c.verdict == "agree", c.summary()


def test_both_sides_pruned_by_other_numbers(tmp_path):
    """resnet34's stages hold 3, 4, 6 and 3 blocks: the default folders prune timm's blocks inside each stage and
    the port's stages 1 and 2 whole. The correct port agrees from default folders and replayed; a norm's eps in a
    block neither side's files hold (timm's ``layer3.4``) is named at that norm: the two float64 twins kept it."""
    original, x = r.original(3, depth=34), r.inputs(3)
    reference = traced(original, (x,), tmp_path / "a")
    for bug, where in ((None, None), ("deep_eps", f"{r.ROOT}.layer3.4.bn2")):
        port = r.port(original, bug)
        for mode, c in (("default folders", nbtrace.compare(reference, traced(port, (x,), tmp_path / f"b-{bug}"))),
                        ("replayed", nbtrace.compare(reference, port))):
            found = c.first_divergence
            verdict = "agree" if bug is None else "diverge"
            assert (found.module_path if found else None) == where and c.verdict == verdict, f"{mode}: {c.summary()}"
