"""The noise-aware verdict at its edges: a NaN a port makes is born where it first appears (not judged as rounding), a
difference born inside layer blocks that pruning removed is named as "between" the blocks kept around them, and an
evidence sentence claims only what its score shows."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import nbtrace
from tests.models.folders import without_twin
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


def _traced(model, folder, x, measure_rounding=False):
    with nbtrace.trace(model, debug_path=folder, use_repr=False, do_prune_layers=False,
                       measure_rounding=measure_rounding):
        model(x)
    return nbtrace.load_trace(folder)


def _compare_port(port_class, tmp_path, rows: int):
    """``Net`` against ``port_class`` with the same weights, both traced on the same ``rows`` inputs."""
    torch.manual_seed(0)
    x = torch.randn(rows, 8)
    reference = Net().eval()
    port = port_class().eval()
    port.load_state_dict(reference.state_dict())
    return nbtrace.compare(_traced(reference, tmp_path / "a", x), _traced(port, tmp_path / "b", x))


def test_a_nan_is_born_where_it_first_appears(tmp_path):
    c = _compare_port(NaNPort, tmp_path, rows=64)
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


class ScaledPort(Net):
    def forward(self, x):
        return self.c(torch.relu(self.b(self.a(x)) * 1.01))  # a scale off by 1% after b


def test_an_evidence_sentence_says_what_its_numbers_show(tmp_path):
    """A 1% scale in the port's own code: from files without measured rounding the verdict stops, unresolved, at
    the call whose code made it (saying how to decide); with measured rounding the evidence states the measured
    numbers and k, and the code that made the unmeasured tensor is named."""
    c = _compare_port(ScaledPort, tmp_path, rows=4096)
    assert c.first_divergence is None and c.verdict == "unresolved" and c.decided_by == "files, unmeasured"
    assert c.unresolved[0] == "Net" and "float64 twin" in c.unresolved[1]
    assert "unresolved" in c.summary() and "compare(folder, port)" in c.summary()

    torch.manual_seed(0)
    x = torch.randn(4096, 8)
    reference, port = Net().eval(), ScaledPort().eval()
    port.load_state_dict(reference.state_dict())
    # the twins taken out (as where they did not fit in memory): the measured rounding decides
    _traced(reference, tmp_path / "ma", x, True), _traced(port, tmp_path / "mb", x, True)
    m = nbtrace.compare(without_twin(tmp_path / "ma"), without_twin(tmp_path / "mb"))
    assert m.decided_by == "measured rounding" and m.first_divergence.module_path == "Net", m.summary()
    top = m.first_divergence.evidence[0]
    assert top.test == "proven" and top.score >= 1 and "k = 2 allows" in top.sentence
    assert top.statistic == pytest.approx(top.score * top.threshold)
    weak = [e for n in m.matches if n.difference is not None for e in n.difference.evidence if e.score < 1]
    assert all("k = 2 allows" in e.sentence for e in weak if e.test == "proven")
