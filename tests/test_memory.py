"""The tracer keeps no tensor alive: once a module returns, only the model's own code holds its tensors."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn

import nbtrace
from nbtrace.demo import build_demo


class CountsSurvivors(nn.Module):
    """Runs the demo model, then (still inside the traced forward) counts its tensors still alive."""

    def __init__(self) -> None:
        super().__init__()
        self.inner, self.inputs = build_demo(num_layers=3)
        self.refs: list[weakref.ref] = []
        self.alive: int | None = None
        for module in self.inner.modules():
            module.register_forward_hook(self._keep, with_kwargs=True)

    def _keep(self, module, args, kwargs, out):
        for value in list(args) + list(kwargs.values()) + [out]:
            for item in value if isinstance(value, (tuple, list, dict)) else [value]:
                item = value[item] if isinstance(value, dict) else item
                if isinstance(item, torch.Tensor):
                    self.refs.append(weakref.ref(item))

    def forward(self, x):
        self.refs.clear()
        out = self.inner(**self.inputs)["logits"]
        gc.collect()
        self.alive = sum(ref() is not None for ref in self.refs)
        return out.sum() + x


@pytest.mark.parametrize("use_repr", [True, False])
def test_no_tensor_outlives_its_module_because_of_the_tracer(tmp_path, use_repr):
    model = CountsSurvivors().eval()
    with torch.no_grad():
        model(torch.zeros(()))
    plain_alive, seen = model.alive, len(model.refs)
    with nbtrace.trace(model, debug_path=tmp_path, use_repr=use_repr, measure_rounding=False):
        model(torch.zeros(()))  # the capture alone: the float64 twin runs copies of the model's code
    assert len(model.refs) == seen > 100
    # alive: the inputs, the logits, the rotary tables and other tensors the model itself still holds
    assert model.alive == plain_alive < seen // 4
