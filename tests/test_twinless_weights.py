"""Two full-tensor folders without a twin name a weight the fingerprints show changed at its own module, even where
no comparison judged that module's output (issue 36's "a weight the sidecar shows changed is named at its module").

A published library that fuses its attention's projections into one ``qkv`` (litgpt's GPT, timm's ViT) against
transformers' ports holding three: the fused call has no counterpart, so its output is never compared, and a key or
value projection scaled by 1.05 in the conversion was left "unresolved" at the attention around it, though the
fingerprints show the fused weight's parts changed. A correct port, whose fused weight holds the same parts, agrees.
"""

from __future__ import annotations

import pytest

import nbtrace
from tests.models.modes import traced
from tests.models.precision import one_thread  # noqa: F401  (a module fixture: one torch thread)

FULL = dict(use_repr=False, do_prune_layers=False, measure_rounding=False)


@pytest.mark.parametrize("library,bug,seed", [("litgpt_llama", "key_scaled", 4), ("timm_vit", "value_scaled", 4)])
def test_a_fused_projection_converted_wrongly_is_named_at_it(tmp_path, library, bug, seed):
    import importlib

    pair = importlib.import_module(f"tests.models.{library}")
    original = pair.original(seed)
    x = pair.inputs(seed)
    reference = traced(original, (x,), tmp_path / "reference", **FULL)
    clean = nbtrace.compare(reference, traced(pair.port(original), (x,), tmp_path / "port", **FULL))
    assert clean.verdict in ("agree", "unresolved") and clean.first_divergence is None, clean.summary()
    c = nbtrace.compare(reference, traced(pair.port(original, bug), (x,), tmp_path / bug, **FULL))
    assert c.verdict == "diverge" and c.first_divergence.module_path == pair.BUGS[bug], c.summary()
    assert c.first_divergence.evidence[0].test == "weights"


@pytest.mark.parametrize("seed,dtype", [(4, "float32"), (6, "bfloat16")])
def test_an_activation_in_a_gated_mlps_own_code_is_named_at_the_mlp(tmp_path, seed, dtype):
    """litgpt's ``LLaMAMLP`` computes ``silu(fc_1(x)) * fc_2(x)`` in its own code (transformers' port: an ``act_fn``
    leaf and a plain product): the port with GELU for SiLU is named at the MLP from full-tensor folders without a
    twin, the product read by what the reference computed; the correct port agrees."""
    import torch

    from tests.models import litgpt_llama as pair

    original = pair.original(seed, getattr(torch, dtype))
    x = pair.inputs(seed)
    reference = traced(original, (x,), tmp_path / "reference", **FULL)
    clean = nbtrace.compare(reference, traced(pair.port(original), (x,), tmp_path / "port", **FULL))
    assert clean.first_divergence is None, clean.summary()
    c = nbtrace.compare(reference, traced(pair.port(original, "act_gelu"), (x,), tmp_path / "gelu", **FULL))
    assert c.verdict == "diverge" and c.first_divergence.module_path == pair.BUGS["act_gelu"], c.summary()
    assert "gated product (SiLU(a)·b" in c.first_divergence.evidence[0].sentence
