"""Weights named directly: parameter fingerprints in the sidecar, and compare() classifying how a converted
weight differs, from the trace files alone."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import nbtrace
from nbtrace.capture.parameters import sample_positions


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(32, 64)
        self.square = nn.Linear(32, 32, bias=False)
        self.down = nn.Linear(64, 32)
        self.norm = nn.LayerNorm(32)

    def forward(self, x):
        return self.norm(self.down(torch.relu(self.up(self.square(x)))))


class TransposedDown(nn.Module):
    """A port that stores the down projection as (in, out) and multiplies on the other side."""

    def __init__(self, down: nn.Linear) -> None:
        super().__init__()
        self.weight = nn.Parameter(down.weight.detach().t().clone())
        self.bias = nn.Parameter(down.bias.detach().clone())

    def forward(self, x):
        return x @ self.weight + self.bias


def _trace(model, folder, x):
    with nbtrace.trace(model, debug_path=folder, use_repr=False, do_prune_layers=False) as rec:
        model(x)
    return rec.trace


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    torch.manual_seed(0)
    model = Net().eval()
    x = torch.randn(4, 32)
    return model, x, _trace(model, tmp_path_factory.mktemp("a"), x)


def _port(reference, change):
    model, _, _ = reference
    port = copy.deepcopy(model)
    with torch.no_grad():
        change(port)
    return port


def _findings(reference, port, tmp_path):
    model, x, a = reference
    b = nbtrace.load_trace(tmp_path) if port is None else _trace(port, tmp_path, x)
    return nbtrace.compare(a, b).weights


def test_fingerprints_are_in_the_sidecar_and_stable(reference, tmp_path):
    model, x, a = reference
    fingerprint = a.sidecar["parameters"]["Net.square"]["weight"]
    assert fingerprint["shape"] == [32, 32] and fingerprint["dtype"] == "float32"
    assert abs(fingerprint["norm"] - model.square.weight.norm().item()) < 1e-5
    flat = model.square.weight.detach().reshape(-1)
    positions = sample_positions(flat.numel())
    assert fingerprint["samples"] == pytest.approx([flat[i].item() for i in positions], rel=1e-6)
    assert len(fingerprint["mirrored_samples"]) == len(positions)
    again = _trace(model, tmp_path, x)
    assert again.sidecar["parameters"] == a.sidecar["parameters"]
    assert nbtrace.load_trace(tmp_path).sidecar["parameters"] == a.sidecar["parameters"]
    assert nbtrace.compare(a, again).weights == []


@pytest.mark.parametrize(
    "change, module, name, kind, words",
    [
        (lambda m: m.square.weight.copy_(m.square.weight.t().clone()), "Net.square", "weight", "transposed", "mirrored"),
        (lambda m: m.down.weight.mul_(1.01), "Net.down", "weight", "scaled", "scaled by 1.01"),
        (lambda m: m.up.weight.copy_(m.up.weight.to(torch.bfloat16).float()), "Net.up", "weight", "rounded", "bfloat16"),
        (lambda m: m.up.weight[16:20].mul_(3.0), "Net.up", "weight", "rows", "rows 16–19 of 64"),
        (lambda m: m.norm.bias.add_(torch.randn(32) * 0.1), "Net.norm", "bias", "perturbed", "relative"),
    ],
)
def test_a_wrongly_converted_weight_is_named_and_classified(reference, tmp_path, change, module, name, kind, words):
    findings = _findings(reference, _port(reference, change), tmp_path)
    assert [(f.module_path, f.name, f.kind) for f in findings] == [(module, name, kind)]
    assert words in findings[0].detail and findings[0].serious


def test_missing_extra_and_transposed_shapes(reference, tmp_path):
    def change(port):
        port.down = TransposedDown(port.down)
        port.square.register_parameter("extra", nn.Parameter(torch.ones(3)))
        port.up.bias = None

    findings = _findings(reference, _port(reference, change), tmp_path)
    found = {(f.module_path, f.name): f.kind for f in findings}
    assert found == {("Net.down", "weight"): "layout", ("Net.square", "extra"): "extra",
                     ("Net.up", "bias"): "missing"}
    layout = next(f for f in findings if f.kind == "layout")  # (in, out) for (out, in): the same product
    assert not layout.serious and "the same values up to layout" in layout.detail


def test_another_dtype_that_only_rounds_is_not_serious(reference, tmp_path):
    model, x, a = reference
    port = copy.deepcopy(model).to(torch.bfloat16)
    b = _trace(port, tmp_path, x.to(torch.bfloat16))
    findings = nbtrace.compare(a, b).weights
    assert findings and {f.kind for f in findings} == {"dtype"} and not any(f.serious for f in findings)
    assert "weights that differ" not in nbtrace.compare(a, b).summary()


def test_the_summary_names_differing_weights(reference, tmp_path):
    port = _port(reference, lambda m: m.down.weight.mul_(1.01))
    model, x, a = reference
    summary = nbtrace.compare(a, _trace(port, tmp_path, x)).summary()
    assert "weights that differ (1):" in summary and "Net.down.weight: scaled by 1.01" in summary


def test_a_renamed_tensor_is_paired_by_shape_and_a_missing_buffer_is_not_serious(reference, tmp_path):
    def change(port):
        weight = port.norm.weight
        del port.norm.weight
        port.norm.register_parameter("scale", weight)  # the port's own name; the values are the same
        port.norm.weight = None
        port.norm.forward = lambda x: torch.nn.functional.layer_norm(x, (32,), port.norm.scale, port.norm.bias)
        port.up.register_buffer("table", torch.ones(2))

    findings = _findings(reference, _port(reference, change), tmp_path)
    assert [(f.module_path, f.name, f.kind, f.serious) for f in findings] == [("Net.up", "table", "extra", False)]
    scaled = _port(reference, change)
    with torch.no_grad():
        scaled.norm.scale.mul_(1.5)
    findings = _findings(reference, scaled, tmp_path / "scaled")
    assert [(f.name, f.kind) for f in findings if f.serious] == [("weight", "scaled")]
    assert "(b: scale)" in str(findings[-1]) or any("(b: scale)" in f.detail for f in findings)
