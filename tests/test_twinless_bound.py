"""Two folders without a float64 twin decide where the evidence is plain (issue 36), and every comparison ends with
the line porters check first.

The reference is the invariant suite's Llama (``tests/models/invariant_ports.py``) at a width and seed no other test
uses; folders are written as the drop-in writes them (full tensors, nothing measured) or with the defaults minus the
twin (printed values, pruned layers). A bug in forward code is named at its module from the derived bound
(``diff/measure/bounds.py``, ``attention_bound.py``); every correct kernel of the suite agrees; a weight the
fingerprints show changed is named at its own module, not an ancestor.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch
from torch import nn

import nbtrace
from nbtrace.cli import main as cli_main
from nbtrace.diff.measure import bounds
from nbtrace.notebook.view import TraceView
from nbtrace.render.assert_message import failure_message
from tests.models import invariant_ports as ip
from tests.models.precision import one_thread  # noqa: F401 - torch on one thread for this module

WIDTH, SEED, LENGTH = 128, 11, 24
P = ip.P


def _folder(model: nn.Module, path, full: bool = True):
    with torch.no_grad(), nbtrace.model_addition_debugger_context(model, debug_path=path, use_repr=not full):
        model(**ip.inputs(SEED, LENGTH))
    return path


@pytest.fixture(scope="module")
def reference():
    return ip.build(WIDTH, torch.float32, SEED, 2)


@pytest.fixture(scope="module")
def reference_folder(reference, tmp_path_factory):
    return _folder(reference, tmp_path_factory.mktemp("twinless") / "reference")


def _port_folder(reference, tmp_path, variant="twice", bug=None, full=True):
    return _folder(ip.port(reference, variant, bug), tmp_path / f"{variant}-{bug}", full)


def test_a_gelu_in_forward_code_is_named_from_two_drop_in_folders(reference, reference_folder, tmp_path, capsys):
    port = ip.port(reference, "twice")
    port.model.layers[1].mlp.act_fn = nn.GELU(approximate="tanh")  # one layer's forward code, weights untouched
    folder = _folder(port, tmp_path / "port")
    c = nbtrace.compare(reference_folder, folder)
    assert c.verdict == "diverge" and c.first_divergence.module_path == f"{P}.layers.1.mlp.act_fn"
    bound = next(e for e in c.first_divergence.evidence if e.test == "bound")
    assert bound.score > 10 and "GELU" in bound.sentence
    assert cli_main(["diff", str(reference_folder), str(folder)]) == 1
    assert "end to end: out of lm_head" in capsys.readouterr().out


@pytest.mark.parametrize("bug, module", [("wrong_eps", f"{P}.layers.0.input_layernorm"),
                                         ("attn_scaling", f"{P}.layers.1.self_attn")])
def test_a_norm_and_an_attention_are_named_in_float32(reference, reference_folder, tmp_path, bug, module):
    c = nbtrace.compare(reference_folder, _port_folder(reference, tmp_path, "sdpa", bug))
    assert c.verdict == "diverge" and c.first_divergence.module_path == module
    assert any(e.test == "bound" and e.score >= 1 for e in c.first_divergence.evidence)


@pytest.mark.parametrize("variant", ["sdpa", "flash", "tf32", "split_k", "fused_gate_up"])
def test_no_correct_kernel_is_named(reference, reference_folder, tmp_path, variant):
    c = nbtrace.compare(reference_folder, _port_folder(reference, tmp_path, variant))
    assert c.first_divergence is None, c.first_divergence
    scores = [e.score for f in c._judge.findings for e in f.evidence if e.test == "bound"]
    assert scores and max(scores) < 1


def test_no_correct_kernel_is_named_in_bfloat16(tmp_path):
    reference = ip.build(WIDTH, torch.bfloat16, SEED + 1, 2)
    a = _folder(reference, tmp_path / "a")
    for variant in ("sdpa", "flash", "split_k"):
        c = nbtrace.compare(a, _folder(ip.port(reference, variant), tmp_path / variant))
        assert c.first_divergence is None, (variant, c.first_divergence)


def test_a_changed_weight_is_named_at_its_module_from_printed_folders(reference, tmp_path):
    a = _folder(reference, tmp_path / "a", full=False)
    for bug, module in (("lossy_weights", f"{P}.layers.0.self_attn.o_proj"),
                        ("weights_x1.01", f"{P}.layers.1.mlp.down_proj")):
        c = nbtrace.compare(a, _port_folder(reference, tmp_path, "sdpa", bug, full=False))
        assert c.verdict == "diverge" and c.first_divergence.module_path == module, bug
        assert c.first_divergence.weights and c.first_divergence.confidence == "certain"


def test_a_changed_weight_in_a_pruned_layer_is_named_at_its_module(tmp_path):
    reference = ip.build(WIDTH, torch.float32, SEED, 4)  # layers 1 and 2 pruned from printed folders
    a = _folder(reference, tmp_path / "a", full=False)
    c = nbtrace.compare(a, _folder(ip.port(reference, "sdpa", "weights_x1.01"), tmp_path / "b", full=False))
    assert not any(n.module_path.startswith(f"{P}.layers.1") for n in c.a.nodes())
    assert c.verdict == "diverge" and c.first_divergence.module_path == f"{P}.layers.1.mlp.down_proj"
    assert "pruning left" in c.first_divergence.reason and c.first_divergence.evidence[0].test == "weights"
    jsonschema.validate(c.to_dict(), nbtrace.verdict_schema())


def test_the_end_to_end_line_in_every_view(reference, reference_folder, tmp_path):
    c = nbtrace.compare(reference_folder, _port_folder(reference, tmp_path, "sdpa", "wrong_eps"))
    found = c.end_to_end
    assert found.path == f"{ip.ROOT}.lm_head" and found.logits and found.positions == 2 * LENGTH - 5
    assert 0 <= found.top5 <= found.positions and found.max_abs > 0 and found.max_rel > 0
    line = "end to end: out of lm_head: max |Δ|"
    assert line in c.summary()
    assert line in c._repr_html_()
    assert line in failure_message(c, "diverge")
    assert c.to_dataframe().attrs["end_to_end"].startswith("out of lm_head")
    banner = TraceView(c).rows["compare"]["verdict"]
    assert banner["end_to_end"].startswith("out of lm_head")
    data = c.to_dict()
    jsonschema.validate(data, nbtrace.verdict_schema())
    json.dumps(data, allow_nan=False)
    assert data["schema_version"] == 1 and data["schema_minor"] >= 1
    assert data["end_to_end"]["top1"] == found.top1 and data["end_to_end"]["positions"] == found.positions


def test_the_end_to_end_line_of_printed_values_has_no_top_k(reference, tmp_path):
    a = _folder(reference, tmp_path / "a", full=False)
    c = nbtrace.compare(a, _port_folder(reference, tmp_path, "sdpa", full=False))
    assert c.end_to_end.basis == "printed" and c.end_to_end.positions is None
    assert "end to end: out of lm_head" in c.summary() and "top-1" not in c.summary()


def test_the_bounds_hold_a_correct_float32_function_and_reject_another():
    bounds.slopes.cache_clear()
    with torch.inference_mode():  # a port's test compares under no_grad or inference_mode: no autograd here
        assert bounds.slopes()["GELU"] == 1.129 and bounds.slopes()["sigmoid"] == 0.25
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(64, 96, generator=generator, dtype=torch.float64) * 2
    x32 = x.float()
    moved = (x32 + torch.randn(x.shape, generator=generator) * 1e-6).double()  # inputs that differ a little
    u = 2.0**-24
    exact = nn.functional.gelu(x32).double()
    correct = nn.functional.gelu(moved.float()).double()
    assert bounds.identify(x.float().double().reshape(-1), exact.reshape(-1), u) == "GELU"
    assert bounds.elementwise("GELU", x32.double(), moved, exact, correct, u).score < 1
    tanh = nn.functional.gelu(x32, approximate="tanh").double()
    assert bounds.elementwise("GELU", x32.double(), x32.double(), exact, tanh, u).score > 10
    w = torch.randn(80, 96, generator=generator) / 96**0.5
    y_a, y_b = x32 @ w.T, (x32.double() @ w.double().T).float()  # float32 against float64 accumulation
    found = bounds.linear(x32.double(), x32.double(), y_a.double(), y_b.double(), u, float(w.norm()), True)
    assert found.score < 1
    scaled = bounds.linear(x32.double(), x32.double(), y_a.double(), 1.05 * y_a.double(), u, float(w.norm()), False)
    assert scaled.score > 1
