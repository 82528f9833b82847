"""timm's VisionTransformer against transformers' ViT port of it, weights converted in code
(``tests/models/timm_vit.py``): timm fuses the query, key and value projections in one ``qkv`` linear map where the
port has three. On every path a user takes, float32 and bfloat16: the correct port agrees with no weight listed, and
each planted bug is named at its module; a part of the split projection converted wrongly is named at the fused one
(the module that holds it), from the parts' weight fingerprints (``diff/verdict/fused_weights.py``)."""

from __future__ import annotations

import pytest
import torch

import nbtrace
from nbtrace.diff.verdict.fused_weights import fused_findings
from tests.models import timm_vit as r
from tests.models.modes import every_mode, reference_folders, traced
from tests.models.precision import one_thread  # noqa: F401  (a module fixture: one torch thread)


@pytest.fixture(scope="module", params=[(0, "float32"), (1, "bfloat16")], ids=["seed0-fp32", "seed1-bf16"])
def case(request, tmp_path_factory):
    seed, dtype = request.param
    base = tmp_path_factory.mktemp(f"vit{seed}")
    original, x = r.original(seed, getattr(torch, dtype)), r.inputs(seed, getattr(torch, dtype))
    return original, x, reference_folders(original, (x,), base), base


def test_the_correct_port_agrees_in_every_mode(case):
    original, x, references, base = case
    for mode, c in every_mode(original, r.port(original), (x,), references, base / "clean", None).items():
        assert c.verdict == "agree", f"{mode}: {c.summary()}"
        assert not [w for w in c.weights if w.serious], f"{mode}: {c.weights}"


@pytest.mark.parametrize("bug", sorted(r.BUGS))
def test_a_bug_is_named_at_its_module(case, bug):
    """A norm's eps, GELU's tanh form, the attention's scale 2% off (its own code), the final norm's eps, and the
    value projection's weight scaled by 1.05, named at timm's fused ``qkv`` (before: at the attention around it)."""
    original, x, (default, _), base = case
    c = nbtrace.compare(default, traced(r.port(original, bug), (x,), base / bug))
    found = c.first_divergence
    assert found is not None and found.module_path == r.BUGS[bug], c.summary()


def test_a_split_part_converted_wrongly_is_named_at_the_fused_projection_with_both_live():
    original, x = r.original(2), r.inputs(2)
    c = nbtrace.compare(original, r.port(original, "value_scaled"), inputs=x)
    assert c.first_divergence.module_path == r.BUGS["value_scaled"], c.summary()
    fused = [w for w in c.weights if w.kind == "fused"]
    assert [w.module_path for w in fused] == [r.BUGS["value_scaled"]] and "v_proj" in fused[0].b_path


@pytest.mark.parametrize("scale,serious", [(1.0, False), (1.0 + 2**-20, False), (1.002, True)])
def test_the_fused_weight_against_its_parts_is_judged_from_the_fingerprints_rounding(tmp_path, scale, serious):
    """The column-block norms of the fused weight against the parts' added: a part scaled by 1.002 is found, one
    moved by a few float32 roundings is not (the fingerprints hold float32 sums to 7 digits)."""
    original, x = r.original(3), r.inputs(3)
    port = r.port(original)
    with torch.no_grad():
        port.vit.layers[0].attention.k_proj.weight.mul_(scale)
    a = nbtrace.load_trace(traced(original, (x,), tmp_path / "a"))
    b = nbtrace.load_trace(traced(port, (x,), tmp_path / "b"))
    c = nbtrace.compare(a, b)
    found = fused_findings(c.alignment.pairs, c.unmatched_a, c.unmatched_b, a.sidecar["parameters"],
                           b.sidecar["parameters"])
    assert bool(found) is serious, [str(f) for f in found]
