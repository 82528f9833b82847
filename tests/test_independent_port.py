"""Replay against a port written by another hand (``tests/models/independent_llama_port.py``): transformers' Llama
as the reference, the port live. What a porter's real bugs look like: the same bug in every layer, where the first
layer's difference is large and a later layer's replay flags the bug's next copy; the answer is where it first
shows."""

from __future__ import annotations

import pytest
import torch

import nbtrace
from tests.models.independent_llama_port import P, AutocastPort, build_ref, port_from


def _ids(seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(100 + seed))


def _reference(folder, seed: int, size: int, dtype=torch.float32):
    model = build_ref(size, seed, dtype)
    with torch.no_grad(), nbtrace.trace(model, debug_path=folder, use_repr=False, do_prune_layers=False):
        model(input_ids=_ids(seed), use_cache=False)
    return model


def _replayed(folder, port):
    return nbtrace.compare(folder, port, call=lambda port, input_ids, **kw: port(input_ids))


@pytest.mark.parametrize("bug,seed,size", [("causal", 0, 128), ("noscale", 7, 64), ("causal", 2, 256)])
def test_a_bug_in_every_layer_is_named_where_it_first_shows(tmp_path, bug, seed, size):
    torch.set_num_threads(1)
    reference = _reference(tmp_path, seed, size)
    c = _replayed(tmp_path, port_from(reference, {"bug": bug, "all": True}))
    named = c.first_divergence.module_path if c.first_divergence is not None else c.unresolved[0]
    assert named == f"{P}.layers.0.self_attn", c.summary()


@pytest.mark.parametrize("seed,size,opts,dtype", [
    (0, 128, {}, torch.float32), (7, 64, {"fused": True, "attn": "sdpa"}, torch.float32),
    (1, 128, {"attn": "flash", "block": 4}, torch.bfloat16), (2, 64, {"order": True}, torch.bfloat16)])
def test_the_correct_port_agrees(tmp_path, seed, size, opts, dtype):
    torch.set_num_threads(1)
    reference = _reference(tmp_path, seed, size, dtype)
    c = _replayed(tmp_path, port_from(reference, opts))
    assert c.verdict == "agree", c.summary()


@pytest.mark.parametrize("bug,born", [
    ("eps", f"{P}.layers.0.input_layernorm"), ("rotary", f"{P}.layers.0.self_attn"), ("gelu", f"{P}.layers.1.mlp"),
    ("transpose", f"{P}.layers.1.self_attn.o_proj"), ("scaled_w", f"{P}.layers.1.mlp.up_proj")])
def test_a_bug_in_one_place_is_named_there(tmp_path, bug, born):
    torch.set_num_threads(1)
    reference = _reference(tmp_path, 1, 128)
    c = _replayed(tmp_path, port_from(reference, {"bug": bug}))
    named = c.first_divergence.module_path if c.first_divergence is not None else c.unresolved[0]
    assert named == born, c.summary()


def _autocast_port(reference, opts=None):
    """The port with float32 weights (the reference's, widened), its reference back in bfloat16."""
    port = port_from(reference.float(), opts or {})
    reference.to(torch.bfloat16)
    return port


@pytest.mark.parametrize("seed,size", [(0, 128), (7, 64)])
def test_a_port_run_under_autocast_is_replayed_under_it(tmp_path, seed, size):
    """float32 weights under bfloat16 autocast against a bfloat16 reference: each call is replayed under the
    autocast it ran under (its own rounding is then bfloat16's), whether the autocast is set inside the port's
    forward or around the call; a bug beside it is still named."""
    torch.set_num_threads(1)
    reference = _reference(tmp_path / "a", seed, size, torch.bfloat16)
    inside = AutocastPort(_autocast_port(reference))
    assert _replayed(tmp_path / "a", inside).verdict == "agree"

    def around(port, input_ids, **kw):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return port(input_ids)

    c = nbtrace.compare(tmp_path / "a", _autocast_port(reference), call=around)
    assert c.verdict == "agree", c.summary()
    c = nbtrace.compare(tmp_path / "a", _autocast_port(reference, {"bug": "transpose"}), call=around)
    assert c.first_divergence is not None and c.first_divergence.module_path == f"{P}.layers.1.self_attn.o_proj"
    assert torch.get_autocast_dtype("cpu") is not None and not torch.is_autocast_enabled("cpu")


def test_each_call_knows_the_autocast_it_ran_under(tmp_path):
    reference = build_ref(64, 0, torch.float32)
    port = AutocastPort(port_from(reference, {}))
    with torch.no_grad(), nbtrace.trace(port, debug_path=tmp_path / "port", use_repr=False) as rec:
        port(_ids(0))
    states = {node.module_path: node.autocast for node in rec.trace.nodes()}
    assert states["AutocastPort"] is None  # the autocast starts inside its forward
    assert states["AutocastPort.inner.blocks.0.attn.q"] == ("cpu", torch.bfloat16)
    with torch.no_grad(), nbtrace.trace(reference, debug_path=tmp_path / "plain", use_repr=False) as rec:
        reference(input_ids=_ids(0), use_cache=False)
    assert {node.autocast for node in rec.trace.nodes()} == {None}
