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
from tests.models.modes import traced
from tests.models.precision import one_thread  # noqa: F401  (a module fixture: one torch thread)


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
