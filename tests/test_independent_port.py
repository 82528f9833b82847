"""Replay against a port written by another hand (``tests/models/independent_llama_port.py``): transformers' Llama
as the reference, the port live. What a porter's real bugs look like: the same bug in every layer, where the first
layer's difference is large and a later layer's replay flags the bug's next copy; the answer is where it first
shows."""

from __future__ import annotations

import pytest
import torch

import nbtrace
from tests.models.independent_llama_port import P, build_ref, port_from


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


@pytest.mark.parametrize("seed,size,opts", [(0, 128, {}), (7, 64, {"fused": True, "attn": "sdpa"})])
def test_the_correct_port_agrees(tmp_path, seed, size, opts):
    reference = _reference(tmp_path, seed, size)
    c = _replayed(tmp_path, port_from(reference, opts))
    assert c.verdict == "agree", c.summary()
