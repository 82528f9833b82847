"""A file never lies: what a trace records of a model's weights is what they held when it ran.

Weight conversions edit parameters in place (``param.data.copy_``, ``.data.mul_``), which bumps no version counter
the parameter shows; a second trace in the same process must still record the new weights, so that two folders
written in one process decide as two folders written in two processes do.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

import nbtrace
from nbtrace.capture import parameters
from nbtrace.core.sidecar import read_sidecar, sidecar_path


def _model(seed: int, width: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width // 2), nn.LayerNorm(width // 2))


def _fingerprints(folder) -> dict:
    trace_file = next(folder.glob("*_debug_tree_FULL_TENSORS.json"))
    return read_sidecar(trace_file)["parameters"]


def _fresh(model: nn.Module) -> dict:
    """The section computed with nothing remembered from earlier traces."""
    saved = dict(parameters._CACHE)
    parameters._CACHE.clear()
    try:
        return parameters.ParameterFingerprints(model, "Sequential").section()
    finally:
        parameters._CACHE.update(saved)


EDITS = {
    "data.mul_": lambda m: m[2].weight.data.mul_(1.5),
    "data.copy_ transposed": lambda m: m[0].weight.data.copy_(m[0].weight.data.t().clone()),
    "data rows swapped": lambda m: m[2].weight.data.copy_(m[2].weight.data.flip(0)),
    "copy_ under no_grad": lambda m: torch.no_grad()(m[3].bias.copy_)(torch.full_like(m[3].bias, 0.25)),
    "load_state_dict": lambda m: m.load_state_dict({k: v * 0.5 for k, v in m.state_dict().items()}),
    "bias.data.add_": lambda m: m[0].bias.data.add_(1e-3),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
@pytest.mark.parametrize(("seed", "width"), [(0, 8), (3, 12)])
def test_a_second_trace_records_weights_edited_in_place(tmp_path, edit, seed, width):
    model = _model(seed, width).eval()
    x = torch.randn(2, width)
    with nbtrace.trace(model, debug_path=tmp_path / "before", measure_rounding=False):
        model(x)
    before = _fingerprints(tmp_path / "before")
    EDITS[edit](model)
    with nbtrace.trace(model, debug_path=tmp_path / "after", measure_rounding=False):
        model(x)
    after = _fingerprints(tmp_path / "after")
    assert after == _fresh(model)  # what the weights hold now, as a fresh process would write it
    assert after != before


def test_an_untouched_model_records_the_same_fingerprints_again(tmp_path):
    model = _model(1, 8).eval()
    x = torch.randn(2, 8)
    for name in ("a", "b"):
        with nbtrace.trace(model, debug_path=tmp_path / name, measure_rounding=False):
            model(x)
    assert sidecar_path(next((tmp_path / "a").glob("*FULL*"))).read_text() == \
        sidecar_path(next((tmp_path / "b").glob("*FULL*"))).read_text().replace(str(tmp_path / "b"), str(tmp_path / "a"))


def test_diff_of_two_folders_from_one_process_names_a_weight_scaled_through_data(tmp_path):
    """The issue's case: a weight scaled by 1.5 through ``.data`` between two traces of one process is "diverge"
    (exit 1) with the weight named, as folders written in two processes are."""
    model = _model(0, 8).eval()
    x = torch.randn(2, 8)
    with nbtrace.trace(model, debug_path=tmp_path / "a", measure_rounding=False):
        model(x)
    model[2].weight.data.mul_(1.5)
    with nbtrace.trace(model, debug_path=tmp_path / "b", measure_rounding=False):
        model(x)
    done = subprocess.run([sys.executable, "-m", "nbtrace", "diff", str(tmp_path / "a"), str(tmp_path / "b")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "scaled by 1.5" in done.stdout
