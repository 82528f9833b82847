"""What a natural port changes without changing the function: a weight's layout, a fused tensor, a leading
size-1 dimension, the names and order of forward's arguments. Small and fast: fingerprints and signatures."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import nbtrace

from nbtrace.capture.parameters import ParameterFingerprints
from nbtrace.diff.replay.callargs import bind
from nbtrace.diff.measure.metrics import same_shape
from nbtrace.diff.verdict.weights import _compare_module, classify


def _fingerprint(weight: torch.Tensor) -> dict:
    holder = nn.Module()
    holder.weight = nn.Parameter(weight.detach().clone(), requires_grad=False)
    return ParameterFingerprints(holder, "M").section()["M"]["weight"]


@pytest.fixture(scope="module")
def conv1d_weight():
    torch.manual_seed(0)
    return torch.randn(24, 40) * 0.02  # GPT-2's Conv1D: [in, out]


def test_a_matrix_in_the_other_layout_is_not_a_difference(conv1d_weight):
    kind, detail, rel, serious = classify(_fingerprint(conv1d_weight), _fingerprint(conv1d_weight.t()))
    assert (kind, serious) == ("layout", False) and "the same values up to layout" in detail


@pytest.mark.parametrize("change, kind, words", [
    (lambda w: w * 1.01, "scaled", "scaled by 1.01"),
    (lambda w: torch.cat([w[:8] * 2, w[8:]]), "rows", "rows 0–7 of 40"),  # rows of the transposed [out, in]
    (lambda w: w.to(torch.bfloat16).float(), "rounded", "bfloat16"),
])
def test_a_wrong_conversion_in_the_other_layout_is_named_as_what_it_is(conv1d_weight, change, kind, words):
    port = change(conv1d_weight.t().contiguous())
    found, detail, _, serious = classify(_fingerprint(conv1d_weight), _fingerprint(port))
    assert (found, serious) == (kind, True) and "stored transposed" in detail and words in detail


def test_an_exact_dtype_change_of_the_other_layout_is_not_a_difference(conv1d_weight):
    exact = conv1d_weight.to(torch.bfloat16)
    kind, _, _, serious = classify(_fingerprint(exact), _fingerprint(exact.float().t()))
    assert kind in ("layout", "dtype") and not serious


def test_an_older_fingerprint_cannot_prove_the_values_and_says_so(conv1d_weight):
    old = {key: value for key, value in _fingerprint(conv1d_weight).items() if key != "mirrored_samples"}
    new = _fingerprint(conv1d_weight.t() * 1.01)
    older = {key: value for key, value in new.items() if key != "mirrored_samples"}
    kind, detail, _, serious = classify(old, older)
    assert (kind, serious) == ("layout", False) and "cannot tell" in detail
    kind, detail, _, serious = classify(old, new)  # one side's transposed samples are proof enough
    assert (kind, serious) == ("scaled", True) and "scaled by 1.01" in detail


@pytest.mark.parametrize("shape_a, shape_b", [([24, 120], [40, 24]), ([120, 24], [40, 24]), ([64, 16], [128, 16])])
def test_fused_or_split_tensors_are_not_a_difference(shape_a, shape_b):
    kind, _, _, serious = classify(_fingerprint(torch.randn(shape_a)), _fingerprint(torch.randn(shape_b)))
    assert (kind, serious) == ("fused", False)


def test_a_renamed_tensor_in_another_layout_pairs_with_its_original(conv1d_weight):
    mine, theirs = {"weight": _fingerprint(conv1d_weight)}, {"kernel": _fingerprint(conv1d_weight.t())}
    [finding] = _compare_module("M.proj", "P.proj", mine, theirs)
    assert (finding.kind, finding.serious) == ("layout", False) and "(b: kernel)" in finding.detail
    theirs["bias"] = _fingerprint(torch.randn(40))  # two left on one side: not paired, named as they are
    assert {(f.name, f.kind) for f in _compare_module("M.proj", "P.proj", mine, theirs)} == {
        ("weight", "missing"), ("kernel", "extra"), ("bias", "extra")}


def test_another_shape_still_is(conv1d_weight):
    kind, _, _, serious = classify(_fingerprint(conv1d_weight), _fingerprint(torch.randn(24, 41)))
    assert (kind, serious) == ("shape", True)


def test_leading_size_one_dimensions_do_not_change_the_values():
    assert same_shape((1, 16, 128), (16, 128)) and same_shape((16, 128), (1, 1, 16, 128))
    assert not same_shape((2, 16, 128), (16, 128)) and not same_shape((16, 1, 128), (16, 128))


class Port(nn.Module):
    def forward(self, ids, scale: float = 1.0):
        return ids * scale


def test_arguments_bind_by_name_position_and_the_one_tensor_left():
    ids = torch.ones(1, 4)
    assert bind(Port().forward, (), {"input_ids": ids}) == ((), {"ids": ids})
    assert bind(Port().forward, (ids,), {"attention_mask": None}) == ((ids,), {})
    args, kwargs = bind(Port().forward, (), {"input_ids": ids, "scale": 2.0})
    assert kwargs == {"ids": ids, "scale": 2.0}
    assert bind(Port().forward, (), {"x": ids, "mask": ids}, {"x": "ids"}) == ((), {"ids": ids})


def test_an_ambiguous_call_names_what_is_unmatched_and_how_to_say_it():
    ids = torch.ones(1, 4)
    with pytest.raises(ValueError, match=r"no value for \['ids'\].*input_ids \(tensor \[1, 4\] float32\).*"
                                         r"attention_mask.*inputs_map="):
        bind(Port().forward, (), {"input_ids": ids, "attention_mask": ids})
    with pytest.raises(ValueError, match="inputs_map names \\['token_ids'\\]"):
        bind(Port().forward, (), {"input_ids": ids}, {"token_ids": "ids"})


def test_inputs_map_is_for_a_live_port(tmp_path):
    with pytest.raises(ValueError, match=r"inputs_map= \(how the reference's arguments reach a live port\) does not "
                                         "apply to a comparison of two traces"):
        nbtrace.compare(str(tmp_path), str(tmp_path), inputs_map={"input_ids": "ids"})
