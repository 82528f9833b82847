"""The fast path (own printer, one-transfer stats, reuse of unchanged tensors) changes no byte."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

import nbtrace
import nbtrace.capture.serialize
from nbtrace.demo import build_demo


class InPlace(nn.Module):
    """A tensor recorded as one module's output is changed in place by the next ones."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.relu = nn.ReLU(inplace=True)
        self.scale = ScaleInPlace()
        self.out = nn.Linear(6, 2)

    def forward(self, x):
        h = self.lin(x)
        self.relu(h)  # changes h in place: lin's recorded output must not change
        self.scale(h)  # again, through a view
        self.relu(h)
        h.data.add_(1)  # and behind autograd's back: the version counter does not move
        return self.out(h), h


class ScaleInPlace(nn.Module):
    def forward(self, x):
        x.view(-1).mul_(3.0)
        return x


def models():
    torch.manual_seed(0)
    yield "demo", *build_demo(num_layers=3)
    yield "inplace", InPlace().eval(), {"x": torch.randn(4, 6)}


@pytest.mark.parametrize("use_repr", [True, False])
@pytest.mark.parametrize("name", ["demo", "inplace"])
def test_fast_and_slow_paths_write_the_same_trace(tmp_path, monkeypatch, name, use_repr):
    model, inputs = dict((n, (m, i)) for n, m, i in models())[name]
    fast_dir, slow_dir = tmp_path / "fast", tmp_path / "slow"
    with nbtrace.trace(model, debug_path=fast_dir, use_repr=use_repr) as fast:
        model(**inputs)
    monkeypatch.setattr(nbtrace.capture.serialize, "fast_printable", lambda tensor: False)
    with nbtrace.trace(model, debug_path=slow_dir, use_repr=use_repr) as slow:
        model(**inputs)
    assert fast.trace.to_dict() == slow.trace.to_dict()
    for suffix in ("FULL_TENSORS", "SUMMARY"):
        file = f"{type(model).__name__}_debug_tree_{suffix}.json"
        assert (fast_dir / file).read_bytes() == (slow_dir / file).read_bytes()
    if not use_repr:
        names = sorted(p.name for p in slow_dir.glob("*.safetensors"))
        assert names == sorted(p.name for p in fast_dir.glob("*.safetensors"))
        for file in names:
            assert torch.equal(load_file(fast_dir / file)["data"], load_file(slow_dir / file)["data"]), file


def test_in_place_changes_after_a_module_returns_do_not_leak_into_its_record(tmp_path):
    model = InPlace().eval()
    x = torch.randn(4, 6)
    expected = model.lin(x)
    with nbtrace.trace(model, debug_path=tmp_path, use_repr=False) as rec:
        model(x)
    assert torch.equal(rec.trace["InPlace.lin"].outputs.load(), expected)
    assert torch.equal(rec.trace["InPlace.relu"].outputs.load(), expected.relu())
    assert torch.equal(rec.trace["InPlace.scale"].inputs["args"][0].load(), expected.relu())
    assert torch.equal(rec.trace["InPlace.out"].inputs["args"][0].load(), expected.relu() * 3 + 1)
