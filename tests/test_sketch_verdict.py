"""Two default folders without their twin (printed values, pruned layers) decide from the runs' own sketches.

The reference is the invariant suite's Llama (``tests/models/invariant_ports.py``) at a width and seeds no other test
uses; both folders are written by ``nbtrace.trace(..., measure_rounding=False)`` with its defaults (the drop-in
writes no sketch).
Their sidecars' ``sketch`` sections (``capture/sketch.py``) bound each leaf (``diff/verdict/sketch_verdict.py``): a
bug in forward code is named at its module, and the correct variant beside it is not.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import nbtrace
from nbtrace.core.sketch import sketch_of
from nbtrace.errors import TraceFormatError
from tests.models import invariant_ports as ip
from tests.models.precision import one_thread  # noqa: F401 - torch on one thread for this module

WIDTH, LENGTH = 192, 32
SEEDS = (5, 12)
P = ip.P


def _folder(model: nn.Module, path, seed: int, dropin: bool = False):
    with torch.no_grad():
        if dropin:
            with nbtrace.model_addition_debugger_context(model, debug_path=path):
                model(**ip.inputs(seed, LENGTH))
        else:
            with nbtrace.trace(model, debug_path=path, measure_rounding=False):
                model(**ip.inputs(seed, LENGTH))
    return path


_REFERENCES: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _references(tmp_path_factory):
    _REFERENCES.clear()
    _REFERENCES["root"] = tmp_path_factory.mktemp("references")
    yield
    _REFERENCES.clear()


def _compare(tmp_path, dtype, seed, port, dropin=False):
    key = (dtype, seed, dropin)
    if key not in _REFERENCES:  # each reference folder is written once for the module
        reference = ip.build(WIDTH, dtype, seed, 2)
        _REFERENCES[key] = reference, _folder(reference, _REFERENCES["root"] / f"{len(_REFERENCES)}", seed, dropin)
    reference, a = _REFERENCES[key]
    return nbtrace.compare(a, _folder(port(reference), tmp_path / "b", seed, dropin))


def _gelu_tanh(reference):
    port = ip.port(reference, "sdpa")
    port.model.layers[1].mlp.act_fn = nn.GELU(approximate="tanh")
    return port


@pytest.mark.parametrize("seed", SEEDS)
def test_a_gelu_in_forward_code_is_named_from_two_printed_folders(tmp_path, seed):
    c = _compare(tmp_path, torch.float32, seed, _gelu_tanh)
    assert c.verdict == "diverge" and c.first_divergence.module_path == f"{P}.layers.1.mlp.act_fn"
    bound = next(e for e in c.first_divergence.evidence if e.test == "bound")
    assert bound.score > 1 and "sketches" in bound.sentence and "GELU" in bound.sentence


def test_the_drop_in_writes_no_sketch_and_blames_nothing_wrong(tmp_path):
    """transformers' drop-in costs what transformers' files cost: no sketch (``benchmarks/bench_trace.py`` measures
    it against transformers' debugger); its printed folders then name no wrong module."""
    c = _compare(tmp_path, torch.float32, SEEDS[0], _gelu_tanh, dropin=True)
    assert "sketch" not in c.a.sidecar and "sketch" not in c.b.sidecar
    found = c.first_divergence
    assert found is None or found.module_path == f"{P}.layers.1.mlp.act_fn", c.summary()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_norm_eps_is_named_where_its_inputs_are_the_same_bit_for_bit(tmp_path, dtype, seed):
    c = _compare(tmp_path, dtype, seed, lambda r: ip.port(r, "sdpa", "wrong_eps"))
    assert c.verdict == "diverge" and c.first_divergence.module_path == f"{P}.layers.0.input_layernorm"
    assert any(e.test == "bound" and "RMSNorm" in e.sentence for e in c.first_divergence.evidence)


def _unsafe_norm(reference):
    port = ip.port(reference, "sdpa")
    port.model.layers[0].input_layernorm = ip.UnsafeRMSNorm(port.model.layers[0].input_layernorm)
    return port


@pytest.mark.parametrize("port", [_unsafe_norm, lambda r: ip.port(r, "sdpa"), lambda r: ip.port(r, "flash")],
                         ids=["norm_without_upcast", "sdpa", "flash"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_correct_variant_is_never_named(tmp_path, dtype, port):
    for seed in SEEDS:
        c = _compare(tmp_path / str(seed), dtype, seed, port)
        assert c.first_divergence is None, (seed, c.first_divergence.module_path)


def test_pruned_blocks_are_not_sketched_and_a_malformed_sketch_is_a_format_error(tmp_path):
    reference = ip.build(WIDTH, torch.float32, SEEDS[0], 4)
    folder = _folder(reference, tmp_path / "a", SEEDS[0])
    trace = nbtrace.load_trace(folder)
    sketch = sketch_of(trace)
    assert f"{P}.layers.1" not in {n.module_path for n in trace.nodes()}  # pruned from the files, and not sketched
    assert f"{P}.layers.3.mlp.act_fn" in sketch.calls and f"{P}.layers.1.mlp.act_fn" not in sketch.calls
    assert f"{P}.layers.0.mlp.down_proj" not in sketch.calls  # a linear map: its weights are the fingerprints'
    assert sketch.padding is not None and sketch.calls[f"{P}.layers.0.mlp.act_fn"]["out"].kept > 0
    side = next(folder.glob("*_NBTRACE.json"))
    document = json.loads(side.read_text())
    document["sections"]["sketch"]["calls"][f"{P}.layers.0.mlp.act_fn"]["out"]["p"] = "not base64!"
    side.write_text(json.dumps(document))
    with pytest.raises(TraceFormatError, match="sketch"):
        nbtrace.compare(folder, folder)
