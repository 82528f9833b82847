"""An offloaded model gets its float64 twin: accelerate's hooks keep its weights off the model (the meta device) and
put them in place as each module runs; the twin and the weight fingerprints read them where the hooks do.

A model larger than its device runs this way (``cpu_offload``, ``disk_offload``, ``dispatch_model`` with an offload
map), and a porter compares it with a default folder of the original: a correct offloaded port agrees, a planted bug
is named at its module from two default folders, and the model's weights are fingerprinted as if they were in place.
"""

from __future__ import annotations

import pytest
import torch

import nbtrace
from tests.models.precision import CASES, build_reference, make_inputs

accelerate = pytest.importorskip("accelerate")

CASE = {case.name: case for case in CASES if case.seed == 0}


def _offload(model, how: str, folder):
    if how == "cpu_offload":
        return accelerate.cpu_offload(model, execution_device=torch.device("cpu"))
    if how == "disk_offload":
        return accelerate.disk_offload(model, offload_dir=str(folder), execution_device=torch.device("cpu"))
    # split: the first layers in place on the CPU, the rest offloaded (to the host, as a GPU's device_map does)
    device_map = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "cpu",
                  "model.layers.2": "disk", "model.layers.3": "disk", "model.norm": "cpu",
                  "model.rotary_emb": "cpu", "lm_head": "disk"}
    return accelerate.dispatch_model(model, device_map=device_map, offload_dir=str(folder))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    model = build_reference(torch.float32, seed=2)
    folder = tmp_path_factory.mktemp("offload") / "reference"
    with torch.no_grad(), nbtrace.trace(model, debug_path=folder):
        model(**make_inputs(3), use_cache=False)
    return model, folder


def _trace_port(reference_model, case: str, how: str, tmp_path):
    port = _offload(CASE[case].make_port(reference_model), how, tmp_path / "offloaded")
    assert any(p.is_meta for p in port.parameters())  # the weights are off the model
    with torch.no_grad(), nbtrace.trace(port, debug_path=tmp_path / "port"):
        port(**make_inputs(3), use_cache=False)
    return port, nbtrace.load_trace(tmp_path / "port")


@pytest.mark.parametrize("how", ["cpu_offload", "disk_offload", "split"])
@pytest.mark.parametrize("case", ["clean", "gelu_tanh", "down_scale"])
def test_an_offloaded_port_gets_its_twin_and_is_judged_by_it(reference, tmp_path, how, case):
    model, folder = reference
    port, trace = _trace_port(model, case, how, tmp_path)
    assert trace.twin is not None and trace.twin.skipped is None and trace.twin.calls
    c = nbtrace.compare(folder, tmp_path / "port")
    named = c.first_divergence.module_path if c.first_divergence is not None else None
    assert named == CASE[case].expected("fp32"), c.summary()
    assert c.decided_by == "float64 twins"


def test_an_offloaded_models_weights_are_fingerprinted_where_its_hooks_keep_them(reference, tmp_path):
    model, folder = reference
    _, trace = _trace_port(model, "clean", "cpu_offload", tmp_path)
    offloaded = trace.sidecar["parameters"]
    plain = nbtrace.load_trace(folder).sidecar["parameters"]
    assert offloaded == plain  # the same weights, fingerprinted as if they were in place


def test_a_live_offloaded_port_against_the_folder(reference, tmp_path):
    model, folder = reference
    port = _offload(CASE["attn_scale"].make_port(model), "cpu_offload", tmp_path)
    c = nbtrace.compare(folder, port)
    assert c.first_divergence is not None
    assert c.first_divergence.module_path == CASE["attn_scale"].expected("fp32")
