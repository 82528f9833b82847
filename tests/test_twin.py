"""The float64 twin: recorded by default, float64 through the model's own casts, and what two twins decide.

``nbtrace.trace`` records each forward's twin (the whole model run again in float64 from the same inputs,
fingerprinted at every call) unless ``measure_rounding=False``; transformers' drop-in records none and writes the
same files. The fingerprints estimate the RMS of a difference without either tensor; two twins decide where the
two functions part ways, from printed, pruned folders as from full tensors.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

import nbtrace
from nbtrace.capture.twin.fingerprint import SUMS, fingerprint
from nbtrace.capture.twin.signs import WIDTH
from nbtrace.capture.twin.numerics import float64_twin
from nbtrace.errors import TraceFormatError
from tests.models import invariant_ports as ip
from tests.models.precision import one_thread  # noqa: F401  (a module fixture: one torch thread)

SIDECAR = "_debug_tree_NBTRACE.json"


def _sections(folder, cls):
    return json.loads((folder / f"{cls}{SIDECAR}").read_text())["sections"]


# -- the fingerprint ------------------------------------------------------------------------------------------
def _estimate(a: torch.Tensor, b: torch.Tensor, valid=None) -> float:
    fa, fb = fingerprint(a, valid), fingerprint(b, valid)
    return math.sqrt(float(((fa[:SUMS] - fb[:SUMS]) ** 2).sum()) / float(fa[SUMS]))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", [(3, 50, 256), (7, 4097), (1, 1, 12)])
def test_two_fingerprints_estimate_the_rms_of_the_difference(seed, shape):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(shape, generator=g, dtype=torch.float64)
    d = torch.randn(shape, generator=g, dtype=torch.float64) * 1e-9
    truth = float(d.square().mean().sqrt())
    assert 0.4 < _estimate(a, a + d) / truth < 2.0
    assert _estimate(a, a) == 0.0
    # a reshape and a leading size-1 dimension are the same values: the same fingerprint
    # (the layout sums after them are for tensors of three axes or more, a leading size-1 dimension aside)
    assert torch.equal(fingerprint(a)[:WIDTH], fingerprint(a.reshape(-1)))
    assert torch.equal(fingerprint(a), fingerprint(a[None]))
    one = torch.zeros_like(a).reshape(-1)
    one[7 % one.numel()] = 1e-6  # a difference in one element is measured exactly
    assert _estimate(a, a + one.reshape(shape)) == pytest.approx(1e-6 / math.sqrt(a.numel()), rel=1e-6)


def test_padding_rows_nans_and_a_masks_fill_are_left_out():
    x = torch.randn(2, 5, 4, dtype=torch.float64)
    valid = torch.ones(2, 5, dtype=torch.bool)
    valid[1, :2] = False
    y = x.clone()
    y[1, :2] = 1e3  # what padding rows hold differs between correct kernels: never seen
    assert _estimate(x, y, valid) == 0.0
    z = x.clone()
    z[0, 0, 0], z[0, 1, 1] = float("nan"), torch.finfo(torch.float32).min
    numbers = fingerprint(z, valid)
    assert numbers[SUMS] == 2 * 5 * 4 - 2 * 4 - 2 and numbers[SUMS + 2] == 2  # kept, left out


# -- float64 through the model's own casts -----------------------------------------------------------------
class Casts(nn.Module):
    """Everything a real model does that turns a float64 run into a float32 one."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        h = self.lin(x.float())
        h = h.to(torch.float32) * torch.tensor(0.5)
        h = torch.softmax(h, -1, dtype=torch.float32) + torch.arange(8).float() / 8
        return h.to(torch.float16).to(x.dtype) + torch.zeros(8, dtype=torch.bfloat16)


def test_the_twin_stays_float64_through_casts():
    model = Casts().double()
    x = torch.randn(3, 8, dtype=torch.float64)
    with float64_twin() as mode:
        out = model(x)
    assert out.dtype == torch.float64 and mode.low == []
    assert torch.get_default_dtype() == torch.float32  # everything restored


def test_an_operation_that_stays_narrow_is_noted():
    class BitView(nn.Module):
        def forward(self, x):
            return (x.double().view(torch.int64) & ~1).view(torch.float64).float()  # the last .float() is widened

    with float64_twin() as mode:
        BitView()(torch.randn(4, dtype=torch.float64))
    assert mode.low == []
    with float64_twin() as mode:
        torch.randn(4, dtype=torch.float64).view(torch.int32).view(torch.float32)
    assert mode.low and mode.low[0][1] == "float32"


# -- capture -------------------------------------------------------------------------------------------------
def test_nbtrace_trace_records_the_twin_and_the_inputs_by_default(tmp_path):
    model = ip.build(128, torch.bfloat16, layers=3)
    x = ip.inputs(length=16)
    with torch.no_grad(), nbtrace.trace(model, debug_path=tmp_path / "default") as rec:
        model(**x)
    t = nbtrace.load_trace(tmp_path / "default")
    written = {n.module_path + (f"@{n.call_index + 1}" if n.call_index else "") for n in t.nodes()}
    # the calls pruning left out of the files are in the twin too, with the order every call started and ended
    assert t.twin is not None and set(t.twin.calls) > written
    assert any(".layers.1." in key for key in t.twin.calls) and not any(".layers.1." in key for key in written)
    assert len(t.twin.events) == 2 * len(t.twin.calls)
    sections = _sections(tmp_path / "default", "LlamaForCausalLM")
    assert "rounding" not in sections and sections["twin"]["padding"] is not None
    kept = rec.trace.sidecar["inputs"]["places"]
    assert kept == ["kwargs.input_ids", "kwargs.attention_mask"]
    with torch.no_grad(), nbtrace.trace(model, debug_path=tmp_path / "off", measure_rounding=False):
        model(**x)
    assert {"twin", "inputs"}.isdisjoint(_sections(tmp_path / "off", "LlamaForCausalLM"))
    with torch.no_grad(), nbtrace.model_addition_debugger_context(model, debug_path=tmp_path / "drop-in"):
        model(**x)
    assert {"twin", "inputs"}.isdisjoint(_sections(tmp_path / "drop-in", "LlamaForCausalLM"))
    for name in ("FULL_TENSORS", "SUMMARY"):  # the promised files are the same bytes with the twin or without
        file = f"LlamaForCausalLM_debug_tree_{name}.json"
        assert (tmp_path / "default" / file).read_bytes() == (tmp_path / "off" / file).read_bytes()


def test_a_model_that_cannot_run_in_float64_keeps_its_trace_and_says_why(tmp_path):
    class Float32Only(nn.Linear):
        def forward(self, x):
            if self.weight.dtype == torch.float64:
                raise TypeError("no float64 here")
            return super().forward(x)

    model = nn.Sequential(Float32Only(4, 4))
    with nbtrace.trace(model, debug_path=tmp_path):
        model(torch.randn(2, 4))
    twin = nbtrace.load_trace(tmp_path).twin
    assert twin.calls == {} and "no float64 here" in twin.skipped


def test_a_malformed_twin_section_names_the_sidecar(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4))
    with nbtrace.trace(model, debug_path=tmp_path):
        model(torch.randn(2, 4))
    path = tmp_path / f"Sequential{SIDECAR}"
    document = json.loads(path.read_text())
    document["sections"]["twin"]["calls"]["Sequential.0"]["out"]["p"] = "not base64!"
    path.write_text(json.dumps(document))
    with pytest.raises(TraceFormatError, match="NBTRACE.json.*bad .twin. section.*base64 of 16 float64"):
        nbtrace.load_trace(tmp_path).twin


# -- the verdict from two twins --------------------------------------------------------------------------------
def _default(model, x, folder):
    with torch.no_grad(), nbtrace.trace(model, debug_path=folder):  # printed values, pruned, the twin
        model(**x)
    return folder


@pytest.mark.parametrize(("dtype", "width", "seed"), [("bf16", 128, 3), ("fp16", 192, 5), ("fp32", 64, 11)])
def test_default_folders_decide_for_correct_and_buggy_ports(tmp_path, dtype, width, seed):
    """Four layers (two pruned) at seeds and widths nothing was tuned on: every correct kernel agrees, every
    semantic bug is named at its module, from printed values."""
    reference = ip.build(width, ip.DTYPES[dtype], seed, layers=4)
    x = ip.inputs(seed, length=40)
    a = _default(reference, x, tmp_path / "a")
    for variant in ("sdpa", "flash", "split_k", "fused_qkv"):
        c = nbtrace.compare(a, _default(ip.port(reference, variant), x, tmp_path / variant))
        assert c.verdict == "agree" and c.decided_by == "float64 twins", (variant, c.summary())
    for bug in ("gelu_tanh", "wrong_eps", "lossy_weights", "row_block"):  # bugs in layers 0 and 1: layer 1 pruned
        c = nbtrace.compare(a, _default(ip.port(reference, "sdpa", bug), x, tmp_path / bug))
        first = c.first_divergence
        assert first is not None, (bug, c.summary())
        # named at its module, also inside the layer pruning left out of the files: the twins kept it
        assert first.module_path == ip.BUGS[bug][1] and first.exact, (bug, str(first))
        if ".layers.1." in first.module_path:
            assert first.node.module_path == ip.P and "pruning left" in first.reason


def test_a_live_port_against_a_default_folder(tmp_path):
    """The folder keeps the top-level inputs: the port runs on them with its own twin, and the twins decide."""
    reference = ip.build(128, torch.bfloat16, 0, layers=2)
    x = ip.inputs(0, length=40)
    a = _default(reference, x, tmp_path / "a")
    assert nbtrace.compare(a, ip.port(reference, "flash")).verdict == "agree"
    c = nbtrace.compare(a, ip.port(reference, "sdpa", "attn_scaling"))
    assert c.first_divergence.module_path == ip.BUGS["attn_scaling"][1] and c.decided_by == "float64 twins"
    assert c.replay is not None and c.replay.answered_by == "twin"


def test_a_float32_model_against_its_bfloat16_copy_is_the_same_function(tmp_path):
    reference = ip.build(128, torch.float32, 0, layers=2)
    x = ip.inputs(0, length=24)
    low = ip.port(reference, "sdpa").to(torch.bfloat16)
    c = nbtrace.compare(_default(reference, x, tmp_path / "a"), _default(low, x, tmp_path / "b"))
    assert c.verdict == "agree", c.summary()
    bug = ip.port(reference, "sdpa", "weights_x1.01").to(torch.bfloat16)
    c = nbtrace.compare(tmp_path / "a", _default(bug, x, tmp_path / "bug"))
    assert c.first_divergence.module_path == ip.BUGS["weights_x1.01"][1]


def test_an_overflow_the_reference_does_not_have_is_a_precision_finding(tmp_path):
    """An RMSNorm without its float32 upcast computes the same function; in float16, x.pow(2) overflows where the
    reference's float32 does not: the verdict agrees, and the precision finding names the norm."""
    reference = ip.build(128, torch.float16, 0, layers=2)
    with torch.no_grad():
        reference.model.embed_tokens.weight.mul_(30000.0)  # activations of several hundred: their squares overflow
    x = ip.inputs(0, length=24)
    port = ip.port(reference, "sdpa")
    port.model.layers[0].input_layernorm = ip.UnsafeRMSNorm(port.model.layers[0].input_layernorm)
    c = nbtrace.compare(_default(reference, x, tmp_path / "a"), _default(port, x, tmp_path / "b"))
    assert c.first_divergence is None, c.summary()
    assert [(p.module_path, p.rule) for p in c.precision] == [(f"{ip.P}.layers.0.input_layernorm", "lost")]


def test_an_unresolved_comparison_marks_its_call_and_what_holds_it(tmp_path):
    reference = ip.build(128, torch.bfloat16, 0, layers=2)
    x = ip.inputs(0, length=24)
    with torch.no_grad(), nbtrace.trace(reference, debug_path=tmp_path / "a", measure_rounding=False):
        reference(**x)
    port = ip.port(reference, "sdpa", "gelu_tanh")
    with torch.no_grad(), nbtrace.trace(port, debug_path=tmp_path / "b", measure_rounding=False):
        port(**x)
    c = nbtrace.compare(tmp_path / "a", tmp_path / "b")
    if c.verdict != "unresolved":
        pytest.skip("the printed values stayed within the tolerance")
    where, why = c.unresolved
    assert "a was traced without its float64 twin" in why and "compare(folder, port)" in why
    report = {n.module_path: row["status"] for n, row in zip(c.a.nodes(), c.node_report())}
    marked = [path for path, status in report.items() if status == "unresolved"]
    assert where in marked and all(where.startswith(p) for p in marked) and ip.ROOT in marked
    from nbtrace.notebook.payload import STATUS_CODES, tree_payload

    payload, _ = tree_payload(c.a, [row["status"] for row in c.node_report()])
    assert payload["status"][payload["first_divergence"]] == STATUS_CODES["unresolved"]
    assert "? unresolved" in c._repr_html_()


def test_measured_rounding_keeps_the_twin_float64(tmp_path):
    """With measure_rounding=True every recorded output is measured against the twin as it runs: that measuring
    is not the twin's own arithmetic (a bfloat16 output read there once made the twin look narrower)."""
    model = ip.build(128, torch.bfloat16, 0, layers=1)
    with torch.no_grad(), nbtrace.trace(model, debug_path=tmp_path, use_repr=False, measure_rounding=True):
        model(**ip.inputs(length=16))
    twin = nbtrace.load_trace(tmp_path).twin
    assert twin.calls and all(p.low is None for places in twin.calls.values() for p in places.values())


class _AddsInPlace(nn.Module):
    """A residual block as timm writes it: the norm's output is added to in place and activated in place, so the
    block returns the very tensor its norm returned, changed since."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn, self.act = nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(self.conv(x))
        y += x
        return self.act(y)


def test_the_runs_own_output_is_read_after_in_place_changes(tmp_path):
    """The run's own output of a block that returns its norm's output changed in place is fingerprinted as it is when
    the block returns (``acc``: the run's rounding against the twin), not as the norm returned it: a stale reading
    measured an RMS 3.2 where the block returned 5.0, and a correct port read "precision lost"."""
    torch.manual_seed(0)
    model = nn.Sequential(_AddsInPlace(), _AddsInPlace()).eval()
    with torch.no_grad(), nbtrace.trace(model, debug_path=tmp_path):
        model(torch.randn(2, 4, 8, 8))
    twin = nbtrace.load_trace(tmp_path).twin
    for name in ("Sequential.0", "Sequential.1"):
        out = twin.calls[name]["out"]
        assert out.run_rms == pytest.approx(out.rms, rel=1e-6) and out.acc < 1e-6 * out.rms, (name, out)
