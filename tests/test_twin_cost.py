"""What the float64 twin costs: one perturbed run moves the weights and the constants at once (issue 37, cost).

A model whose constants outside its ``state_dict`` are float32 or wider runs its twin once as it is, once perturbed
(every stored tensor by one float64 rounding, the constants by one of their own) and, stored wider than bfloat16,
once rounded to bfloat16: three float64 forwards where there were four. The perturbed run's sensitivity is both
``s64`` and ``sconst``. Constants held narrower than float32 keep a run of their own: in the one run their rounding
would let two sides with the same constants differ by a bfloat16 rounding. Verdicts: a planted bug is named from two
default folders, the correct port agrees.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import nbtrace
from nbtrace.capture.twin.noise import noise as _noise, scale_by_noise as _scale_by_noise

SIDECAR = "_debug_tree_NBTRACE.json"


class Tabled(nn.Module):
    """A linear map, then a sine table of its own (a non-persistent buffer: a constant outside the state_dict)."""

    def __init__(self, width: int = 32, act: nn.Module | None = None) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.act = act if act is not None else nn.GELU()
        self.register_buffer("freq", 1.0 / (100.0 ** (torch.arange(width) / width)), persistent=False)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.proj(x)) + torch.sin(x * self.freq))


def _counting(model: nn.Module) -> list[str]:
    calls: list[str] = []
    model.out.register_forward_pre_hook(lambda *_: calls.append("out"))  # hooks run on the twin's copies too
    return calls


def _twin(folder) -> dict:
    return json.loads(next(folder.glob(f"*{SIDECAR}")).read_text())["sections"]["twin"]


def _trace(model: nn.Module, x: torch.Tensor, folder) -> None:
    with torch.no_grad(), nbtrace.trace(model, folder, measure_rounding="twin"):
        model(x)


@pytest.mark.parametrize("seed", [0, 1])
def test_one_perturbed_run_moves_weights_and_constants(tmp_path, seed):
    torch.manual_seed(seed)
    model, x = Tabled(), torch.randn(3, 32)
    calls = _counting(model)
    _trace(model, x, tmp_path / "a")
    assert calls == ["out"] * 4  # recorded, the twin, perturbed once, rounded to bfloat16
    prints = [p for places in _twin(tmp_path / "a")["calls"].values() for p in places.values()]
    moved = [p for p in prints if p.get("s64")]
    assert moved and all(p["s64"] == p["sconst"] for p in moved)
    # the constants' float32 rounding, not float64's alone: the sine of the table moved
    assert max(p["s64"] / p["rms"] for p in moved) > 2.0**-30


def test_constants_narrower_than_float32_keep_a_run_of_their_own(tmp_path):
    torch.manual_seed(0)
    model = Tabled().to(torch.bfloat16)  # its table rounded to bfloat16, nothing the twin can see through
    calls = _counting(model)
    _trace(model, torch.randn(3, 32, dtype=torch.bfloat16), tmp_path / "a")
    assert calls == ["out"] * 4  # recorded, the twin, perturbed by float64's rounding, the constants by theirs
    out = _twin(tmp_path / "a")["calls"]["Tabled.out"]["out"]
    assert out["sconst"] > 1e6 * out["s64"] > 0


@pytest.mark.parametrize("seed", [0, 3])
def test_default_folders_name_a_planted_bug_and_agree_on_a_correct_port(tmp_path, seed):
    torch.manual_seed(seed)
    reference, x = Tabled(), torch.randn(4, 32)
    correct = Tabled()
    correct.load_state_dict(reference.state_dict())
    buggy = Tabled(act=nn.GELU(approximate="tanh"))
    buggy.load_state_dict(reference.state_dict())
    for name, model in (("a", reference), ("ok", correct), ("bug", buggy)):
        _trace(model, x, tmp_path / name)
    assert nbtrace.compare(tmp_path / "a", tmp_path / "ok").first_divergence is None
    found = nbtrace.compare(tmp_path / "a", tmp_path / "bug").first_divergence
    assert found is not None and found.module_path == "Tabled.act"


@pytest.mark.parametrize("numel,start", [(5, 0), (70000, 65000), (200000, 3), (65521, 1)])
def test_the_float64_perturbation_is_the_noise_sequence_it_always_was(numel, start):
    torch.manual_seed(0)
    tensor = torch.randn(numel, dtype=torch.float64)
    expected = tensor * (1 + 2.0**-53 * _noise(numel, start, tensor.device))
    _scale_by_noise(tensor, start)
    assert torch.equal(tensor, expected)
    strided = torch.randn(numel, 2, dtype=torch.float64).t()[0]  # not contiguous
    expected = strided * (1 + 2.0**-53 * _noise(numel, start, strided.device))
    _scale_by_noise(strided, start)
    assert torch.equal(strided, expected)
