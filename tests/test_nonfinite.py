"""NaN and inf where the format keeps no stats: found from the tensor's file."""

from __future__ import annotations

import pytest
import torch

import nbtrace


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex64])
def test_a_nan_in_a_tensor_the_format_keeps_no_stats_for_is_found_in_its_file(tmp_path, dtype):
    """The format writes stats for float16/bfloat16/float32 only: a float64 (or complex) NaN in the middle of a
    tensor shows in no stats and in no printed edge, but with full tensors its file holds it."""

    class Poke(torch.nn.Module):
        def forward(self, x):
            x = x.clone()
            x[0, 500] = float("nan")
            return x

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.poke, self.b = torch.nn.Identity(), Poke(), torch.nn.Identity()

        def forward(self, x):
            return self.b(self.poke(self.a(x)))

    model = Model()
    with nbtrace.trace(model, debug_path=tmp_path / "full", use_repr=False) as rec:
        model(torch.randn(2, 1000).to(dtype))
    assert rec.trace.first_nonfinite().module_path == "Model.poke"
    loaded = nbtrace.load_trace(tmp_path / "full")
    assert loaded.first_nonfinite().module_path == "Model.poke" and not loaded["Model.a"].nonfinite
    assert loaded["Model.b"].nonfinite  # handed a NaN
    model.poke = torch.nn.Identity()
    with nbtrace.trace(model, debug_path=tmp_path / "clean", use_repr=False) as rec:
        model(torch.randn(2, 1000).to(dtype))
    assert rec.trace.first_nonfinite() is None
