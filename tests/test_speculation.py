"""Skipping predicted-pruned layer blocks never changes what is written, however layers are called."""

from __future__ import annotations

import warnings

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from tests.models import core_models
import nbtrace
import nbtrace.capture.recorder


class Block(core_models.Block):
    def __init__(self) -> None:
        super().__init__(size=4)


class Layers(nn.Module):
    """A stack of blocks; ``order`` says which blocks run (and how often)."""

    def __init__(self, n: int, order: list[int]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(n))
        self.order = order

    def forward(self, x):
        for i in self.order:
            x = self.layers[i](x)
        return x


class TwoStacks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.ModuleList(Block() for _ in range(4))
        self.b = nn.ModuleList(Block() for _ in range(4))

    def forward(self, x):
        for layer in self.a:
            x = layer(x)
        for layer in self.b:
            x = layer(x)
        return x


class Nested(nn.Module):
    """Layers within layers: pruning applies at two levels."""

    def __init__(self) -> None:
        super().__init__()
        self.groups = nn.ModuleList(Layers(4, [0, 1, 2, 3]) for _ in range(4))

    def forward(self, x):
        for group in self.groups:
            x = group(x)
        return x


class LeafList(nn.Module):
    """A ModuleList of leaves: never layer blocks, never pruned."""

    def __init__(self) -> None:
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(4, 4) for _ in range(5))

    def forward(self, x):
        return sum(head(x) for head in self.heads)


class Sparse(nn.Module):
    """Mixture-of-experts style: only some experts run, in data order."""

    def __init__(self) -> None:
        super().__init__()
        self.experts = nn.ModuleList(Block() for _ in range(8))

    def forward(self, x):
        return sum(self.experts[i](x) for i in (0, 3, 5))


class InPlaceAfterBlock(nn.Module):
    """Changes a block's output in place after it returned, then stops early."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(6))

    def forward(self, x):
        for layer in self.layers[:4]:
            x = layer(x)
            x.mul_(2)
        return x


class Skipper(nn.Module):
    """Block 2 decides not to call its submodules: it is not a layer block."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Conditional(skip=(i == 2)) for i in range(5))

    def forward(self, x):
        for layer in self.layers[:3]:
            x = layer(x)
        return x


class Conditional(Block):
    def __init__(self, skip: bool) -> None:
        super().__init__()
        self.skip = skip

    def forward(self, x):
        return x * 2 if self.skip else super().forward(x)


CASES = {
    "full": lambda: Layers(6, [0, 1, 2, 3, 4, 5]),
    "early_exit": lambda: Layers(6, [0, 1, 2, 3]),
    "reversed": lambda: Layers(6, [5, 4, 3, 2, 1, 0]),
    "reused": lambda: Layers(2, [0, 1, 0, 1, 0]),
    "skips_one": lambda: Layers(6, [0, 1, 3, 4, 5]),
    "starts_late": lambda: Layers(6, [2, 3, 4]),
    "two_stacks": TwoStacks,
    "nested": Nested,
    "leaf_list": LeafList,
    "sparse": Sparse,
    "not_a_block": Skipper,
}


def trace_files(model, folder, use_repr, speculate, monkeypatch):
    with monkeypatch.context() as patch:
        if not speculate:
            patch.setattr(nbtrace.capture.recorder, "numbered_containers", lambda model, name: {})
        torch.manual_seed(1)
        x = torch.randn(2, 4)
        with nbtrace.trace(model, debug_path=folder, use_repr=use_repr) as rec:
            model(x)
    files = {p.name: p.read_bytes() for p in folder.glob("*.json")}
    tensors = {p.name: load_file(p)["data"] for p in folder.glob("*.safetensors")}
    return rec.trace, files, tensors


@pytest.mark.parametrize("use_repr", [True, False])
@pytest.mark.parametrize("case", sorted(CASES))
def test_speculation_writes_what_tracing_everything_writes(tmp_path, monkeypatch, case, use_repr):
    torch.manual_seed(0)
    model = CASES[case]().eval()
    fast, fast_files, fast_tensors = trace_files(model, tmp_path / "fast", use_repr, True, monkeypatch)
    slow, slow_files, slow_tensors = trace_files(model, tmp_path / "slow", use_repr, False, monkeypatch)
    assert fast_files == slow_files
    assert fast.to_dict() == slow.to_dict()
    assert sorted(fast_tensors) == sorted(slow_tensors)
    for name, tensor in slow_tensors.items():
        assert torch.equal(fast_tensors[name], tensor), name


def test_an_early_exit_keeps_the_last_block_that_ran(tmp_path):
    torch.manual_seed(0)
    model = Layers(6, [0, 1, 2, 3]).eval()
    with nbtrace.trace(model, debug_path=tmp_path) as rec:
        model(torch.randn(2, 4))
    blocks = [n.module_path for n in rec.trace.root.children]
    assert blocks == ["Layers.layers.0", "Layers.layers.3"]
    assert rec.trace["Layers.layers.3.act"].outputs.lines


def test_a_held_tensor_changed_in_place_is_named_in_a_warning(tmp_path):
    torch.manual_seed(0)
    model = InPlaceAfterBlock().eval()
    with pytest.warns(UserWarning, match=r"InPlaceAfterBlock\.layers\.3"):
        with nbtrace.trace(model, debug_path=tmp_path):
            model(torch.randn(2, 4))


def test_no_warning_when_nothing_held_changes(tmp_path):
    torch.manual_seed(0)
    model = Layers(6, [0, 1, 2, 3]).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with nbtrace.trace(model, debug_path=tmp_path):
            model(torch.randn(2, 4))


def test_a_block_that_raises_before_its_first_call_keeps_the_previous_block(tmp_path):
    class Fails(Block):
        def forward(self, x):
            raise ValueError("no")

    torch.manual_seed(0)
    model = Layers(6, [0, 1, 2, 3])
    model.layers[3] = Fails()
    with pytest.raises(ValueError):
        with nbtrace.trace(model, debug_path=tmp_path) as rec:
            model(torch.randn(2, 4))
    children = rec.trace.root.children
    assert [c.module_path for c in children] == ["Layers.layers.0", "Layers.layers.2", "Layers.layers.3"]
    assert children[1].children[-1].outputs.lines  # layers.2 was held, then kept with its values
    assert children[2].error["message"] == "no"


def test_predicted_pruned_blocks_are_never_serialized(tmp_path, monkeypatch):
    import nbtrace.capture.serialize

    described: list[tuple] = []
    original = nbtrace.capture.serialize.Serializer._describe

    def counting(self, tensor):
        described.append(tuple(tensor.shape))
        return original(self, tensor)

    monkeypatch.setattr(nbtrace.capture.serialize.Serializer, "_describe", counting)
    torch.manual_seed(0)
    model = Layers(8, list(range(8))).eval()
    x = torch.randn(2, 4)
    counts = {}
    for prune in (False, True):
        described.clear()
        with nbtrace.trace(model, debug_path=tmp_path / str(prune), do_prune_layers=prune):
            model(x)
        counts[prune] = len(described)
    # unpruned: every distinct tensor of 8 blocks; pruned: blocks 1-6 are skipped entirely
    assert counts[True] <= counts[False] * 3 // 8 + 2
