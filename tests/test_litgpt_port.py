"""litgpt's GPT (a small Llama: a fused ``qkv`` of unequal parts under grouped-query attention, the rotary tables held
by the root as buffers and handed to every block) against transformers' ``LlamaForCausalLM`` with its weights
converted in code (``tests/models/litgpt_llama.py``). Every path a user takes, float32 and bfloat16, and the bfloat16
port of the float32 original: the correct port agrees, and each bug is named at its module."""

from __future__ import annotations

import pytest
import torch

import nbtrace
from tests.models import litgpt_llama as r
from tests.models.modes import every_mode, reference_folders, traced
from tests.models.precision import one_thread  # noqa: F401  (a module fixture: one torch thread)


@pytest.fixture(scope="module", params=[(0, "float32"), (1, "bfloat16")], ids=["seed0-fp32", "seed1-bf16"])
def case(request, tmp_path_factory):
    seed, dtype = request.param
    base = tmp_path_factory.mktemp(f"litgpt{seed}")
    original, x = r.original(seed, getattr(torch, dtype)), r.inputs(seed)
    return original, x, reference_folders(original, (x,), base), base


def test_the_correct_port_agrees_in_every_mode(case):
    original, x, references, base = case
    for mode, c in every_mode(original, r.port(original), (x,), references, base / "clean", None).items():
        assert c.verdict == "agree", f"{mode}: {c.summary()}"
        assert not [w for w in c.weights if w.serious], f"{mode}: {c.weights}"


@pytest.mark.parametrize("bug", sorted(r.BUGS))
def test_a_bug_is_named_at_its_module(case, bug):
    """In bfloat16 litgpt holds its rotary tables rounded (``model.to(torch.bfloat16)`` rounds its ``cos`` and
    ``sin`` buffers) where the port computes them in float32 from ``inv_freq``: the twin sees through them
    (``GPT.rope_cache()`` computes them again) and allows 8 of their float32 roundings, not 8 bfloat16 ones (6.9%
    relative), which hid a norm's eps, a 2% attention scale and a key projection scaled by 1.05."""
    original, x, (default, _), base = case
    c = nbtrace.compare(default, traced(r.port(original, bug), (x,), base / bug))
    found = c.first_divergence
    assert found is not None and found.module_path == r.BUGS[bug], c.summary()


@pytest.mark.parametrize("bug", [None, "norm_eps", "key_scaled"])
def test_a_bf16_port_of_the_float32_original(tmp_path, bug):
    original, x = r.original(2), r.inputs(2)
    folder = traced(original, (x,), tmp_path / "a")
    port = r.port(original, bug).to(torch.bfloat16)
    for c in (nbtrace.compare(folder, traced(port, (x,), tmp_path / "b")), nbtrace.compare(folder, port)):
        found = c.first_divergence
        assert (found.module_path if found else None) == r.BUGS.get(bug) and c.verdict in ("agree", "diverge"), \
            c.summary()
