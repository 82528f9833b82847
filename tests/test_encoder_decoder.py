"""An encoder-decoder of our own (tests/models/encdec.py: a convolutional front-end over mel frames, cross-attention)
against a port written the other way (fused projections, sdpa, positions computed on the fly, other names), traced
with nbtrace.trace's defaults in float32 (printed values, pruned layers, the float64 twin): the correct port agrees,
each planted bug is named at its module, or bracketed by the layer blocks pruning removed from one side."""

from __future__ import annotations

import pytest
import torch

import nbtrace
from tests.models import encdec as ed
from tests.models.precision import one_thread  # noqa: F401  (a module fixture: one torch thread)


def _folder(model, x, folder, **options):
    with torch.no_grad(), nbtrace.trace(model, debug_path=folder, **options):
        model(*x)
    return folder


@pytest.fixture(scope="module", params=[0, 1], ids=["seed0", "seed1"])
def case(request, tmp_path_factory):
    seed = request.param
    base = tmp_path_factory.mktemp(f"encdec{seed}")
    original, x = ed.build(seed), ed.inputs(seed)
    return original, x, _folder(original, x, base / "original"), base


def test_the_correct_port_agrees(case):
    original, x, reference, base = case
    c = nbtrace.compare(reference, _folder(ed.Port.from_original(original), x, base / "clean"), rename=ed.RENAME)
    assert c.verdict == "agree" and c.decided_by == "float64 twins", c.summary()
    # the port's sinusoid table is its own (computed in each forward): the constants differ, and the notes say so
    assert c.twin.constants_differ and any("constants" in note for note in c.notes)


@pytest.mark.parametrize("bug", ["gelu_tanh", "enc_norm_eps", "position_offset"])
def test_a_bug_is_named_at_its_module(case, bug):
    original, x, reference, base = case
    port = ed.Port.from_original(original, {bug})
    c = nbtrace.compare(reference, _folder(port, x, base / bug), rename=ed.RENAME)
    assert c.first_divergence is not None and c.first_divergence.module_path == ed.BUGS[bug], c.summary()


def test_cross_attention_without_its_scale(case):
    """The port's trace pruned its first decoder layer (transformers' rule keeps the first and the last layer block
    of the model): its float64 twin kept it, so the default folders name the cross-attention too, as unpruned
    folders, the live port and both live modules do."""
    original, x, reference, base = case
    port = ed.Port.from_original(original, {"cross_scale"})
    pruned = nbtrace.compare(reference, _folder(port, x, base / "cross"), rename=ed.RENAME).first_divergence
    assert pruned is not None and pruned.exact and pruned.module_path == ed.BUGS["cross_scale"]
    assert pruned.b_path == "Port.dec.0.xattn"
    whole = _folder(port, x, base / "cross-all", do_prune_layers=False)
    everything = _folder(original, x, base / "original-all", do_prune_layers=False)
    named = nbtrace.compare(everything, whole, rename=ed.RENAME).first_divergence
    assert named.module_path == ed.BUGS["cross_scale"] and named.exact
    assert nbtrace.compare(reference, port, rename=ed.RENAME).first_divergence.module_path == ed.BUGS["cross_scale"]
    live = nbtrace.compare(original, port, inputs=(x, {}), rename=ed.RENAME)
    assert live.first_divergence.module_path == ed.BUGS["cross_scale"] and live.replay.both_live


def test_two_live_modules_each_called_its_own_way(case):
    """The original takes keywords (input_features=, decoder_input_ids=), the port other names: inputs_map= or
    call= say how the original's arguments reach the port, both live as with a folder and the live port; or
    port_inputs= gives the port its own arguments."""
    original, x, _, _ = case
    keywords = {"input_features": x[0], "decoder_input_ids": x[1]}
    port = ed.Port.from_original(original, {"gelu_tanh"})
    mapped = nbtrace.compare(original, port, inputs=keywords, rename=ed.RENAME,
                             inputs_map={"input_features": "features", "decoder_input_ids": "tokens"})
    assert mapped.first_divergence.module_path == ed.BUGS["gelu_tanh"], mapped.summary()
    called = nbtrace.compare(original, ed.Port.from_original(original), inputs=keywords, rename=ed.RENAME,
                             call=lambda p, input_features, decoder_input_ids: p(input_features, decoder_input_ids))
    assert called.verdict == "agree", called.summary()
    own = nbtrace.compare(original, port, inputs=x, port_inputs={"features": x[0], "tokens": x[1]}, rename=ed.RENAME)
    assert own.first_divergence.module_path == ed.BUGS["gelu_tanh"] and own.replay.both_live, own.summary()
    with pytest.raises(ValueError, match="give one of inputs_map, call or port_inputs, not inputs_map and call"):
        nbtrace.compare(original, port, inputs=keywords, inputs_map={}, call=lambda p, **k: p(**k))


def test_narrow_two_live_modules_each_called_its_own_way(case):
    """narrow(original, port, ...) takes the same per-side call description as compare: inputs_map binds the
    original's keywords to the port's parameters; the GELU that differs is named at its line, the correct port has
    no diverging operation, and a keyword of the other form of narrow is refused."""
    original, x, _, _ = case
    keywords = {"input_features": x[0], "decoder_input_ids": x[1]}
    names = {"input_features": "features", "decoder_input_ids": "tokens"}
    found = nbtrace.narrow(original, ed.Port.from_original(original, {"gelu_tanh"}), (), keywords, inputs_map=names)
    assert found.first is not None and found.first.port.name == "gelu" and "F.gelu" in found.first.reference.source.text
    assert nbtrace.narrow(original, ed.Port.from_original(original), (), keywords, inputs_map=names).first is None
    with pytest.raises(ValueError, match="reference= does not apply to narrow"):
        nbtrace.narrow(original, original, x, reference=original)
    with pytest.raises(ValueError, match="give inputs_map or port_args/port_kwargs, not both"):
        nbtrace.narrow(original, original, x, inputs_map=names, port_args=x)


def test_a_bfloat16_port_against_the_float32_original(case):
    """Weights and inputs rounded into the port's dtype are the port's rounding: the correct bfloat16 port agrees
    with the float32 original's folder, replayed and traced; the cross-attention without its scale is named."""
    original, x, reference, base = case
    for bug in (None, "cross_scale"):
        port = ed.Port.from_original(original, {bug} if bug else set()).to(torch.bfloat16)
        traced = _folder(port, (x[0].bfloat16(), x[1]), base / f"bf16-{bug}")
        for c in (nbtrace.compare(reference, traced, rename=ed.RENAME), nbtrace.compare(reference, port, rename=ed.RENAME)):
            if bug is None:
                assert c.verdict == "agree", c.summary()
            else:
                assert c.first_divergence.module_path == ed.BUGS[bug], c.summary()


def test_measured_folders_without_a_twin_name_every_bug(case):
    """Full-tensor folders that measured their rounding and hold no float64 twin decide from the rounding measured at
    every call, encoder, decoder and cross-attention: the correct port agrees and each bug is named at its module;
    positions read one place off are born in the decoder's own code (an arange beside an encoder output that
    differs by rounding), not in the embedding that reads them."""
    from tests.models.folders import without_twin

    original, x, _, base = case
    measured = {"use_repr": False, "do_prune_layers": False, "measure_rounding": True}
    reference = without_twin(_folder(original, x, base / "measured-original", **measured))
    for bug in (None, *ed.BUGS):
        port = ed.Port.from_original(original, {bug} if bug else set())
        c = nbtrace.compare(reference, without_twin(_folder(port, x, base / f"measured-{bug}", **measured)),
                            rename=ed.RENAME)
        assert c.decided_by == "measured rounding", c.summary()
        if bug is None:
            assert c.verdict == "agree", c.summary()
        else:
            assert c.first_divergence.module_path == ed.BUGS[bug], c.summary()
