"""The invariant suite: correct kernels agree, bugs are named at their module or not at all, by every method.

transformers' Llama (eager attention) against ports with the same weights (``tests/models/invariant_ports.py``),
judged by every path a user takes (``tests/models/invariant_suite.py``): two folders traced with nbtrace.trace's
defaults (printed values, pruned, the float64 twin), such a folder against the live port, files without anything
measured, files with measured rounding, a folder without the twin replayed call by call, and both sides live. A
subset of (variant or bug, dtype, method, seed) runs here, chosen so that every variant, bug, dtype and method
appears; the whole sweep (every combination, seeds, widths) is ``python benchmarks/bench_precision.py``. torch runs
on one thread (small tensors: threads only contend).
"""

from __future__ import annotations

import pytest
import torch

import nbtrace
from nbtrace.capture.twin import numerics as exact
from nbtrace.diff.replay import replay
from tests.models import invariant_ports as ip
from tests.models.invariant_suite import run_case
from tests.models.precision import one_thread  # noqa: F401  (a module fixture: one torch thread)


CORRECT = [  # (variant, dtype, method, seed)
    ("itself", "bf16", "replay", 0),
    ("twice", "fp16", "live", 1),
    ("sdpa", "bf16", "measured", 0),
    ("sdpa", "fp16", "default", 2),
    ("flash", "bf16", "live", 0),
    ("flash", "fp16", "replay", 0),
    ("flash", "bf16", "default", 1),
    ("tf32", "fp32", "files", 0),
    ("tf32", "fp32", "port", 1),
    ("split_k", "fp16", "measured", 1),
    ("split_k", "fp32", "replay", 0),  # sums chunks after .float(): its float64 twin stays float64 (Widen)
    ("split_k", "bf16", "port", 0),
    ("fused_qkv", "bf16", "replay", 1),
    ("fused_gate_up", "fp32", "live", 0),
    ("fused_gate_up", "bf16", "default", 0),
]


@pytest.mark.parametrize(("variant", "dtype", "method", "seed"), CORRECT)
def test_a_correct_kernel_agrees(tmp_path, variant, dtype, method, seed):
    outcome = run_case(tmp_path, dtype, variant, None, method, seed=seed)
    allowed = ("ok", "unresolved") if method == "files" else ("ok",)
    assert outcome.grade in allowed, outcome
    assert outcome.ratio < 1.0


BUGGY = [  # (bug, dtype, method); the port's attention is sdpa: a correct kernel beside the bug
    ("weights_x1.01", "bf16", "replay"),
    ("lossy_weights", "fp16", "files"),
    ("wrong_eps", "fp32", "measured"),
    ("attn_scaling", "fp16", "live"),
    ("row_block", "bf16", "live"),
    ("gelu_tanh", "bf16", "live"),
    ("gelu_tanh", "bf16", "default"),  # below bf16's rounding: the twins, float64, see it from printed folders
    ("attn_scaling", "fp16", "port"),
    ("wrong_eps", "bf16", "default"),
    ("lossy_weights", "fp32", "port"),
]


@pytest.mark.parametrize(("bug", "dtype", "method"), BUGGY)
def test_a_bug_beyond_the_measured_rounding_is_named_at_its_module(tmp_path, bug, dtype, method):
    outcome = run_case(tmp_path, dtype, "sdpa", bug, method)
    assert outcome.grade == "ok", outcome
    assert outcome.named == ip.BUGS[bug][1]


@pytest.mark.parametrize(("bug", "dtype", "method"), [("gelu_tanh", "bf16", "replay"),
                                                      ("norm_no_upcast", "bf16", "live")])
def test_a_bug_below_the_measured_rounding_is_never_misnamed(tmp_path, bug, dtype, method):
    outcome = run_case(tmp_path, dtype, "flash", bug, method)
    assert outcome.grade in ("ok", "miss", "unresolved"), outcome


def test_a_model_against_itself_agrees_without_any_statistic(tmp_path):
    """Identical outputs: every replayed call reproduces the reference bit for bit, so nothing is even tested."""
    model = ip.build(256, torch.bfloat16, layers=1)
    x = ip.inputs(length=20)
    with torch.no_grad(), nbtrace.trace(model, debug_path=tmp_path, use_repr=False, do_prune_layers=False,
                                        measure_rounding=False):
        model(**x)
    c = nbtrace.compare(tmp_path, model)
    assert c.verdict == "agree" and c.decided_by == "replayed"
    assert all(not m.difference.evidence for m in c.matches if m.difference is not None and m.difference.replayed)


def test_replay_runs_on_the_module_device_and_restores_the_numerics(tmp_path, monkeypatch):
    """Inputs go to the device the module's parameters are on (here a fake: the move is recorded), and the float64
    truth runs with TF32 off and the math attention backend; every flag is back afterwards, also on an error."""
    moved = []
    real = replay.to_device
    monkeypatch.setattr(replay, "to_device", lambda value, device: moved.append(str(device)) or real(value, device))
    model = ip.build(256, torch.float32, layers=1)
    x = ip.inputs(length=20)
    with torch.no_grad(), nbtrace.trace(model, debug_path=tmp_path, use_repr=False, do_prune_layers=False,
                                        measure_rounding=False):
        model(**x)
    c = nbtrace.compare(tmp_path, ip.port(model, "sdpa"))
    assert c.verdict == "agree" and moved and set(moved) == {"cpu"}

    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        with pytest.raises(RuntimeError, match="inside"), exact.exact_numerics():
            assert torch.get_float32_matmul_precision() == "highest"
            assert torch.backends.cuda.matmul.fp32_precision == "ieee" == torch.backends.cudnn.conv.fp32_precision
            raise RuntimeError("inside")
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(before)


def test_both_live_reads_like_compare_and_refuses_what_it_cannot_do(tmp_path):
    model = ip.build(256, torch.float32, layers=1)
    x = ip.inputs(length=20)
    c = nbtrace.compare(model, ip.port(model, "fused_qkv"), inputs=x)
    assert c.verdict == "agree" and c.decided_by == "float64 twins" and c.replay.both_live
    assert "decided by: float64 twins" in c.summary()
    assert c.to_dataframe().attrs["decided_by"].startswith("float64 twins")
    with pytest.raises(ValueError, match="inputs="):
        nbtrace.compare(model, ip.port(model))
    with pytest.raises(TypeError, match="inputs must be"):
        nbtrace.compare(model, ip.port(model), inputs=[1, 2])
