"""narrow() leaves nothing behind: no torch function mode, no hook, the modules' buffers, dtype and torch's
random state as they were, also when the module raises in the middle of its forward."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.overrides import _get_current_function_mode_stack

import nbtrace


class Counting(nn.Module):
    """A forward that changes state: a call counter (a buffer), a running mean, and dropout in training."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("calls", torch.zeros(()))
        self.register_buffer("running", torch.zeros(8))
        self.fail = fail

    def forward(self, x):
        self.calls += 1
        self.running.mul_(0.9).add_(0.1 * x.mean(0))
        h = nn.functional.dropout(self.lin(x), p=0.5, training=True)
        if self.fail:
            raise RuntimeError("broken forward")
        return torch.tanh(h)


def _hooks(module: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in module.modules())


def _state(module: nn.Module) -> list[torch.Tensor]:
    return [t.detach().clone() for t in list(module.parameters()) + list(module.buffers())]


@pytest.mark.parametrize("fail", [False, True], ids=["returns", "raises"])
def test_nothing_stays_installed_and_no_state_changes(fail):
    torch.manual_seed(0)
    reference, port = Counting(), Counting(fail=fail)
    port.load_state_dict(reference.state_dict())
    x = torch.randn(4, 8)
    before = [_state(reference), _state(port)]
    rng = torch.random.get_rng_state()
    if fail:
        with pytest.raises(RuntimeError, match="broken forward"):
            nbtrace.narrow(reference, port, (x,))
    else:
        diff = nbtrace.narrow(reference, port, (x,))
        assert diff.first is None, str(diff)  # dropout draws the same numbers in both runs and their float64 twins
    assert _get_current_function_mode_stack() == []
    assert _hooks(reference) == 0 and _hooks(port) == 0
    for saved, module in zip(before, (reference, port)):
        assert all(torch.equal(a, b) for a, b in zip(saved, _state(module)))
    assert torch.equal(torch.random.get_rng_state(), rng)


def test_a_dtype_runs_copies_and_the_modules_keep_theirs():
    torch.manual_seed(0)
    reference, port = Counting(), Counting()
    port.load_state_dict(reference.state_dict())
    diff = nbtrace.narrow(reference, port, (torch.randn(4, 8),), dtype=torch.bfloat16)
    assert diff.reference.dtype == "bfloat16" and reference.lin.weight.dtype == torch.float32
    assert port.lin.weight.dtype == torch.float32


def test_a_changed_dropout_probability_is_named():
    # the variant of the test above: a port that differs inside is named (a test that can fail)
    class Port(Counting):
        def forward(self, x):
            self.calls += 1
            self.running.mul_(0.9).add_(0.1 * x.mean(0))
            h = nn.functional.dropout(self.lin(x), p=0.5, training=True)
            return torch.sigmoid(h)

    torch.manual_seed(0)
    reference, port = Counting(), Port()
    port.load_state_dict(reference.state_dict())
    first = nbtrace.narrow(reference, port, (torch.randn(4, 8),)).first
    assert first is not None and first.port.name == "sigmoid" and first.reference.name == "tanh"


def test_wrong_arguments_name_what_is_wrong():
    with pytest.raises(TypeError, match="reference must be a torch.nn.Module"):
        nbtrace.narrow("not a module", nn.Linear(2, 2), (torch.randn(1, 2),))
    with pytest.raises(TypeError, match="port module is missing"):
        nbtrace.narrow(nn.Linear(2, 2))


def test_an_operation_float64_cannot_run_is_listed_not_fatal(monkeypatch):
    from nbtrace.diff.operations import record as record_module

    def broken(func, name):
        if name == "tanh":
            raise NotImplementedError("no float64 kernel")
        return func

    monkeypatch.setattr(record_module, "wide_func", broken)
    torch.manual_seed(0)
    reference, port = Counting(), Counting()
    port.load_state_dict(reference.state_dict())
    diff = nbtrace.narrow(reference, port, (torch.randn(4, 8),))
    assert diff.first is None
    assert [entry.split(" at ")[0] for entry in diff.reference.without_twin] == ["tanh"]
    assert _get_current_function_mode_stack() == []
