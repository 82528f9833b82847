"""The noise-aware verdict at its edges: a NaN a port makes is born where it first appears (not judged as rounding), and a
difference born inside layer blocks that pruning removed is named as "between" the blocks kept around them."""

from __future__ import annotations

import torch
from torch import nn

import nbtrace
from tests.models.precision import BUGS, DTYPES, P, build_reference, make_inputs, one_thread, sdpa_port, trace_model  # noqa: F401


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.c(torch.relu(self.b(self.a(x))))


class NaNPort(Net):
    def forward(self, x):
        h = self.b(self.a(x)).clone()
        h[0, 0] = float("nan")  # the port's own code, between b and c
        return self.c(torch.relu(h))


def _traced(model, folder, x):
    with nbtrace.trace(model, debug_path=folder, use_repr=False, do_prune_layers=False):
        model(x)
    return nbtrace.load_trace(folder)


def test_a_nan_is_born_where_it_first_appears(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(64, 8)
    reference = Net().eval()
    a = _traced(reference, tmp_path / "a", x)
    port = NaNPort().eval()
    port.load_state_dict(reference.state_dict())
    c = nbtrace.compare(a, _traced(port, tmp_path / "nan", x))
    first = c.first_divergence
    assert (first.module_path, first.observed_path, first.io) == ("Net", "Net.c", "input"), c.summary()
    assert first.evidence[0].test == "broken" and "NaN/inf" in first.reason


def test_a_bug_in_pruned_layers_is_named_between_the_kept_blocks(tmp_path):
    reference = build_reference(DTYPES["fp16"])
    inputs = make_inputs()
    a = trace_model(reference, tmp_path / "a", inputs, prune=True)
    port = sdpa_port(reference)
    BUGS["down_scale"].inject(port)  # layer 2 of 0..3: pruned
    c = nbtrace.compare(a, trace_model(port, tmp_path / "b", inputs, prune=True))
    first = c.first_divergence
    assert first.module_path == P and not first.exact
    assert first.pruned == (f"{P}.layers.1", f"{P}.layers.2")
    assert first.reason.startswith(f"born between {P}.layers.0 and {P}.layers.3")
    assert "trace with do_prune_layers=False to see which" in first.reason
    assert [w.module_path for w in first.weights] == [f"{P}.layers.2.mlp.down_proj"]  # the fingerprints tell
    clean = nbtrace.compare(a, trace_model(sdpa_port(reference), tmp_path / "clean", inputs, prune=True))
    assert clean.verdict == "agree"
