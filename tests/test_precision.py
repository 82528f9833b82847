"""The noise-aware verdict on the precision case set (tests/models/precision.py): transformers' Llama with eager
attention as the reference, an sdpa port with at most one injected bug, in bfloat16, float16 and float32.

A SUBSET of the cases runs here, chosen per dtype to cover every class of bug. From two trace folders without
measured rounding the verdict may agree, stop at "unresolved", or name a module on evidence no correct kernel
produces (the weights' fingerprints) — never a wrong module. Replayed, a bug is named where it exceeds the
rounding measured against the port's float64 result; one below it (a GELU approximation in bf16) may go
unnamed, never misnamed. The invariant suite is ``tests/test_invariants.py``.
"""

from __future__ import annotations

import pytest

import nbtrace
from nbtrace.diff.measure.rounding import DECISIVE
from nbtrace.diff.verdict.evidence import CONFIDENCES
from tests.models.precision import CASES, P, one_thread, trace_case  # noqa: F401  (one_thread: a fixture)

BY_NAME = {case.name: case for case in CASES}
#: the subset: (case, dtype) -> the module a named divergence must be (None: nothing may be named)
FILES = {
    ("clean", "bf16"): None,
    ("gelu_tanh", "bf16"): f"{P}.layers.0.mlp.act_fn",
    ("attn_scale", "bf16"): f"{P}.layers.1.self_attn",
    ("norm_no_upcast", "bf16"): f"{P}.layers.0.input_layernorm",
    ("row_block", "bf16"): f"{P}.layers.2.self_attn.q_proj",
    ("clean", "fp16"): None,
    ("eps", "fp16"): f"{P}.layers.0.input_layernorm",
    ("bf16_round_trip", "fp16"): f"{P}.layers.1.mlp.up_proj",
    ("fp8_round_trip", "fp16"): f"{P}.layers.1.self_attn.v_proj",
    ("clean", "fp32"): None,
    ("down_scale", "fp32"): f"{P}.layers.2.mlp.down_proj",
    ("norm_no_upcast", "fp32"): None,  # an fp32 model has nothing to upcast: the same computation
}
#: what replay must name: the bugs whose difference exceeds the measured rounding in that dtype
REPLAY_FINDS = {("row_block", "bf16"), ("eps", "fp16"), ("bf16_round_trip", "fp16"), ("fp8_round_trip", "fp16"),
                ("down_scale", "fp32")}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(reference model, port, trace a, trace b) per (case, dtype); each dtype's reference traced once."""
    base = tmp_path_factory.mktemp("precision")
    references: dict[str, tuple] = {}
    made: dict[tuple[str, str], tuple] = {}

    def get(name: str, dtype: str):
        if (name, dtype) not in made:
            model, port, a, b = trace_case(BY_NAME[name], dtype, base / dtype, reference=references.get(dtype))
            references[dtype] = (model, a)
            made[(name, dtype)] = (model, port, a, b)
        return made[(name, dtype)]

    return get


def _named(comparison) -> str | None:
    first = comparison.first_divergence
    return first.module_path if first is not None else None


@pytest.mark.parametrize(("name", "dtype"), list(FILES))
def test_from_files_no_false_alarm_and_no_wrong_module(run, name, dtype):
    _, _, a, b = run(name, dtype)
    c = nbtrace.compare(a, b)
    assert c.method == "files" and c.decided_by == "files, unmeasured"
    expected = FILES[(name, dtype)]
    first = c.first_divergence
    if first is None:  # agree, or unresolved at a call (never named), saying how to decide
        assert c.verdict in ("agree", "unresolved"), c.summary()
        assert {row["status"] for row in c.node_report()} <= {"match", "only_a", "no_data", "unresolved"}
        if c.verdict == "unresolved":
            assert "float64 twin" in c.unresolved[1] and "compare(folder, port)" in c.unresolved[1]
        return
    assert first.module_path == expected, c.summary()
    assert first.confidence in CONFIDENCES and first.evidence and not first.replayed
    top = first.evidence[0]
    assert top.score >= 1 and top.score == max(e.score for e in first.evidence if e.test in DECISIVE)
    report = {n.module_path: row["status"] for n, row in zip(c.a.nodes(), c.node_report())}
    assert [p for p, status in report.items() if status == "first"] == [expected]


@pytest.mark.parametrize(("name", "dtype"), [k for k, v in FILES.items() if v is not None])
def test_replay_names_the_bug(run, name, dtype):
    _, port, a, _ = run(name, dtype)
    c = nbtrace.compare(a, port)
    assert c.method == "replay" and c.replay is not None and c.replay.replayed and c.decided_by == "replayed"
    expected = BY_NAME[name].expected(dtype)
    first = c.first_divergence
    if (name, dtype) not in REPLAY_FINDS and first is None:
        return  # below the rounding measured in this dtype: unnamed, never misnamed
    assert first is not None and first.module_path == expected, c.summary()
    assert first.replayed and all(e.source == "replay" for e in first.evidence)
    assert c.match_of(first.node).difference.replayed
    assert "the port's float64 result differs from the reference's output by" in first.evidence[0].sentence


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_replay_of_a_correct_port_agrees(run, dtype):
    _, port, a, _ = run("clean", dtype)
    c = nbtrace.compare(a, port)
    assert c.method == "replay" and c.verdict == "agree", c.summary()
    assert all(m.difference is None or (m.difference.score or 0) < 1 for m in c.matches)


def test_own_and_inherited_difference_of_every_call(run):
    """Downstream of a bug a correct call inherits the difference; the call where it is born adds it."""
    _, _, a, b = run("row_block", "fp16")
    c = nbtrace.compare(a, b)
    with_tensors = [m for m in c.matches if any(d.basis == "tensors" for d in m.diffs)]
    assert with_tensors and all(m.difference is not None for m in with_tensors)
    born = c.match_of(a[f"{P}.layers.2.self_attn.q_proj"]).difference
    assert born.unit == 2.0**-11 and born.own > 10 and born.inherited < 5 and born.score >= 1
    after = c.match_of(a[f"{P}.layers.3.self_attn.q_proj"]).difference
    assert after.inherited > 5 and after.score < 1  # it differs, and all of it is inherited


@pytest.mark.parametrize("name", ["attn_scale", "norm_no_upcast", "row_block", "gelu_tanh"])
def test_a_correct_and_a_buggy_port_pair_the_same_calls(run, name):
    _, _, a, clean = run("clean", "bf16")
    _, _, _, buggy = run(name, "bf16")

    def pairs(b):
        return [(x.module_path, x.call_index, y.module_path, y.call_index)
                for x, y in nbtrace.compare(a, b).alignment.pairs]

    assert pairs(clean) == pairs(buggy)


def test_suspects_and_the_per_element_tolerance_of_before(run):
    _, _, a, b = run("clean", "bf16")
    tolerance = nbtrace.compare(a, b, rtol=1.6e-2, atol=1e-6)  # what compare did before: a false alarm in bf16
    assert tolerance.method == "tolerance" and tolerance.first_divergence is not None
    assert tolerance.first_divergence.confidence == "likely"
    assert any("rtol/atol given" in note for note in tolerance.notes)
    noise = nbtrace.compare(a, b)
    assert noise.verdict == "agree" and all(0.9 <= score < 1 for _, score in noise.suspects)
