"""narrow(): the first operation and source line where a port differs, inside one call.

transformers' Llama decoder layer against the same layer of ``tests/models/ports.py``'s port, each bug in
float32 and bfloat16: the operation and the line that hold it are named on both sides; a correct port names
nothing (the variant every bug test is held against)."""

from __future__ import annotations

import pytest
import torch

import nbtrace
from tests.models.layer_cases import layer_pair
from tests.models.precision import one_thread  # noqa: F401

pytestmark = pytest.mark.usefixtures("one_thread")

#: bug -> (what the reference's line holds, what the port's line holds)
LINES = {
    "eps": ("variance_epsilon", "self.eps"),
    "rotary_k": ("k_embed = (k * cos)", "k = k.repeat_interleave"),
    "rounded_scale": ("* scaling", "* scale"),
    "no_padding_mask": ("attn_weights + attention_mask", "scores.masked_fill(~allowed"),
    "gelu_tanh": ("self.act(input)", "nn.functional.gelu(gate, approximate=self.approximate)"),  # GELUActivation
}


def _narrow(bugs=(), dtype=torch.float32, full=False, **options):
    ref, port, args, kwargs, port_args = layer_pair(bugs, dtype=dtype, **options)
    return nbtrace.narrow(ref, port, args, kwargs, port_args=port_args, dtype=dtype, full=full)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("bug", sorted(LINES))
def test_each_bug_is_narrowed_to_its_operation_and_line(bug, dtype):
    options = {"scale": 0.35} if bug == "rounded_scale" else {"hidden_act": "gelu"} if bug == "gelu_tanh" else {}
    diff = _narrow([bug] if bug != "rounded_scale" else [], dtype, **options)
    first = diff.first
    assert first is not None and first.kind == "math", str(diff)
    ref_text, port_text = LINES[bug]
    ref_file = "activations.py:" if bug == "gelu_tanh" else "modeling_llama.py:"
    assert ref_text in first.reference.source.text and first.reference.source.short.startswith(ref_file), str(diff)
    assert port_text in first.port.source.text and first.port.source.short.startswith("ports.py:"), str(diff)
    if first.difference is not None:
        assert first.difference > 1e6 * first.allowed  # a difference of the math, far beyond float64 rounding
    assert "ports.py:" in str(diff) and " vs " in str(diff)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
def test_a_correct_port_names_nothing(dtype):
    # float16: the reference adds finfo.min (-65504) to its scores where the port fills it; a sentinel keeps its
    # value in the float64 run, so fully masked (padding) rows stay uniform on both sides
    diff = _narrow((), dtype)
    assert diff.first is None, str(diff)
    assert "no operation differs" in str(diff)
    frame = diff.to_dataframe()
    assert not (frame.status == "differs").any()
    assert set(frame.side) == {"reference", "port"}


def test_softmax_in_float16_is_a_precision_difference_in_float32():
    diff = _narrow(["softmax_fp16"], torch.float32)
    first = diff.first
    assert first is not None and first.kind == "precision", str(diff)
    assert ".half().softmax(-1)" in first.port.source.text and "softmax" in first.reference.source.text
    assert first.difference > 100 * first.allowed


def test_softmax_in_float16_inside_a_bfloat16_model_is_within_its_rounding():
    # float16 rounds 8x finer than bfloat16: the port's result stays within what the model's dtype rounds
    assert _narrow(["softmax_fp16"], torch.bfloat16).first is None


def test_the_table_marks_the_diverging_operation_on_both_sides():
    frame = _narrow(["rotary_k"]).to_dataframe()
    differs = frame[frame.status == "differs"]
    assert sorted(differs.side) == ["port", "reference"]
    assert {"operation", "module", "file", "line", "code", "own_rounding_u", "counterparts", "arg_shapes"} <= set(frame.columns)
    linear = frame[(frame.side == "port") & (frame.operation == "linear")].iloc[0]
    assert linear.arg_shapes == ((2, 7, 32), (64, 32)) and linear.arg_dtypes == ("float32", "float32")
    ref = frame[frame.side == "reference"]
    assert ref.module.str.startswith("self_attn").any() and ref.module.str.startswith("mlp").any()
    assert (frame.status == "agrees").sum() > 20


def test_summaries_by_default_full_tensors_on_request():
    kept = _narrow(["eps"], full=True).first
    assert kept.reference.low is not None and kept.reference.truth.dtype == torch.float64
    diff = _narrow(["eps"])
    op = diff.first.reference
    assert op.low is None and op.truth is None and set(op.summary()) == {"mean", "std", "min", "max"}
    frame = diff.to_dataframe()
    floating = frame[frame.dtype.str.contains("float")]
    assert len(floating) > 100 and floating["std"].notna().all() and (floating["max"] >= floating["min"]).all()
    assert frame[~frame.dtype.str.contains("float")]["std"].isna().all()  # masks and positions: no summary
