"""compare on a real port: transformers' Llama (the original) against a from-scratch port with other names and
structure (fused qkv and gate/up, an extra wrapper, an attention-core module, an extra Dropout and Identity,
another root class), loading the same weights. Each injected bug must be named at the module of the original
where it originates — with and without ``rename``, with full tensors (safetensors), printed values (repr) and
stats only (SUMMARY) — and the faithful port must agree.
"""

from __future__ import annotations

import re

import pytest

import nbtrace
from tests.models.ports import BUGS, P, RENAME, ROOT, trace_original, trace_port

# mode -> (use_repr, which file to load)
MODES = {"safetensors": (False, "FULL_TENSORS"), "repr": (True, "FULL_TENSORS"), "stats": (True, "SUMMARY")}
# Bugs below the resolution of one mode: name -> what happens instead (checked in its own test)
LIMITS = {("softmax_fp16", "stats"), ("rounded_scale", "stats"), ("gelu_tanh", "repr"), ("gelu_tanh", "stats")}
SINGLE_LAYER_BUGS = [bug for bug in BUGS if bug != "layer1_transposed_o"]
#: bugs that need an original with another MLP activation (a tanh GELU differs only from an exact GELU)
ACTIVATION = {"gelu_tanh": "gelu"}


def _load(folder, cls, kind):
    return nbtrace.load_trace(folder / f"{cls}_debug_tree_{kind}.json")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Traces on disk, made once per (side, bug, mode-recording, prune, the original's MLP activation)."""
    base = tmp_path_factory.mktemp("ports")
    made: dict = {}

    def get(side: str, bug: str | None, mode: str, prune: bool = False, act: str = "silu"):
        use_repr, kind = MODES[mode]
        key = (side, bug, use_repr, prune, act)
        folder = base / f"{side}-{bug}-{'repr' if use_repr else 'st'}-{'prune' if prune else 'full'}-{act}"
        if key not in made:
            if side == "a":
                trace_original(folder, use_repr=use_repr, prune=prune, hidden_act=act)
            else:
                trace_port(folder, [bug] if bug else [], use_repr=use_repr, prune=prune, hidden_act=act)
            made[key] = folder
        return _load(made[key], ROOT if side == "a" else "TinyLlamaPort", kind)

    return get


@pytest.mark.parametrize("rename", [None, RENAME], ids=["aligned", "renamed"])
@pytest.mark.parametrize("mode", list(MODES))
def test_faithful_port_agrees(store, mode, rename):
    a, b = store("a", None, mode), store("b", None, mode)
    result = nbtrace.compare(a, b, rename=rename)
    assert result.first_divergence is None, str(result.first_divergence)
    assert result.agree is True
    assert result.compared >= 40  # not vacuous: most of the model was compared
    statuses = {row["status"] for row in result.node_report()}
    assert "diverged" not in statuses and "first" not in statuses


@pytest.mark.parametrize("rename", [None, RENAME], ids=["aligned", "renamed"])
@pytest.mark.parametrize(
    ("bug", "mode"),
    # what stats alone cannot resolve (LIMITS) is asserted by test_stats_only_limit instead
    [(bug, mode) for bug in SINGLE_LAYER_BUGS for mode in MODES if (bug, mode) not in LIMITS],
)
def test_bug_is_named_where_it_originates(store, bug, mode, rename):
    act = ACTIVATION.get(bug, "silu")
    a, b = store("a", None, mode, act=act), store("b", bug, mode, act=act)
    result = nbtrace.compare(a, b, rename=rename)
    first = result.first_divergence
    if mode == "safetensors" and first is None:  # files without measured rounding: located, left unresolved
        assert result.verdict == "unresolved" and result.unresolved[0] == BUGS[bug], result.summary()
        return
    assert first is not None, f"{bug} not detected"
    assert first.module_path == BUGS[bug], str(first)
    assert first.exact
    assert result.agree is False
    report = {node.module_path: row for node, row in zip(result.a.nodes(), result.node_report())}
    assert report[BUGS[bug]]["status"] == "first"
    assert [p for p, row in report.items() if row["status"] == "first"] == [BUGS[bug]]
    assert first.basis == {"safetensors": "tensors", "repr": "printed", "stats": "stats"}[mode]


@pytest.mark.parametrize("mode", ["safetensors", "repr"])
def test_numbers_and_counterpart(store, mode):
    a, b = store("a", None, mode), store("b", "rotary_k", mode)
    result = nbtrace.compare(a, b, rename=RENAME)
    if mode == "safetensors":  # full tensors, nothing measured: unresolved at the call, its numbers said
        assert result.unresolved[0] == f"{P}.layers.0.self_attn" and "differs by" in result.unresolved[1]
        result = nbtrace.compare(a, b, rename=RENAME, rtol=1e-5, atol=1e-6)  # a tolerance names it
    first = result.first_divergence
    assert first.module_path == f"{P}.layers.0.self_attn"
    assert first.b_path == "TinyLlamaPort.blocks.0.attn"
    assert first.observed_path == f"{P}.layers.0.self_attn.o_proj"
    assert first.io == "input" and first.arg == "args.0" and first.b_arg == "args.0"
    assert first.max_rel > 1e-3 and first.max_abs > 0 and 0.9 < first.cosine < 1.0
    # the fused qkv has no counterpart: q/k/v are reported as unobserved, b's core as running in between
    assert {p.rsplit(".", 1)[-1] for p in first.unobserved} == {"q_proj", "k_proj", "v_proj"}
    assert "TinyLlamaPort.blocks.0.attn.core" in first.b_only_between
    leaf = nbtrace.compare(a, store("b", "transposed_o", mode)).first_divergence
    assert leaf.module_path == leaf.observed_path == f"{P}.layers.2.self_attn.o_proj"
    assert leaf.b_path == "TinyLlamaPort.blocks.2.attn.out.linear"
    assert leaf.io == "output"


def test_stats_only_limit(store):
    """fp16 softmax changes the attention output by ~2e-4: the stats of o_proj's input move by a few units of
    their last digit, within float32 tolerance. Stats alone first see it beyond tolerance in the MLP of the
    same layer; the result says so honestly: the earlier, smaller differences are listed."""
    a, b = store("a", None, "stats"), store("b", "softmax_fp16", "stats")
    first = nbtrace.compare(a, b).first_divergence
    assert first is not None and first.module_path.startswith(f"{P}.layers.0.")
    assert first.earlier and first.earlier[0][0] == f"{P}.layers.0.self_attn.o_proj"
    assert "show earlier" in str(first)


@pytest.mark.parametrize("mode", ["repr", "stats"])
def test_printed_values_see_a_tanh_gelu_late_and_list_it_earlier(store, mode):
    """A tanh GELU moves layer 0's MLP by ~2e-6 relative, within float32 tolerance of printed values or stats;
    the tolerance first sees it beyond tolerance in a later layer's MLP (never before the bug); printed values
    list the earlier, smaller difference in layer 0's MLP, stats do not see it there at all (full tensors
    locate it: test_bug_is_named_where_it_originates)."""
    a, b = store("a", None, mode, act="gelu"), store("b", "gelu_tanh", mode, act="gelu")
    first = nbtrace.compare(a, b).first_divergence
    assert first is not None and re.fullmatch(rf"{re.escape(P)}\.layers\.\d+\.mlp", first.module_path), str(first)
    if mode == "repr":
        assert first.earlier and first.earlier[0][0].startswith(f"{BUGS['gelu_tanh']}.")
        assert "show earlier" in str(first)


def test_stats_only_see_a_rounded_scale_at_the_output_projection(store):
    """Scores scaled by 0.35 instead of 1/sqrt(8) move the stats of o_proj's input by less than their last
    digit; its output's max moves by more: stats alone blame o_proj, inside the attention to blame."""
    a, b = store("a", None, "stats"), store("b", "rounded_scale", "stats")
    first = nbtrace.compare(a, b).first_divergence
    assert first is not None and first.module_path == f"{BUGS['rounded_scale']}.o_proj"


@pytest.mark.parametrize("rename", [None, RENAME], ids=["aligned", "renamed"])
@pytest.mark.parametrize("mode", ["safetensors", "repr"])
def test_bug_inside_a_pruned_layer_is_bracketed(store, mode, rename):
    a, b = store("a", None, mode, prune=True), store("b", "layer1_transposed_o", mode, prune=True)
    result = nbtrace.compare(a, b, rename=rename)
    first = result.first_divergence
    if mode == "safetensors" and first is None:  # nothing measured: unresolved at the call holding the blocks
        assert result.verdict == "unresolved" and result.unresolved[0] == P, result.summary()
        return
    assert first is not None
    assert first.exact is False
    assert first.pruned == (f"{P}.layers.1", f"{P}.layers.1")
    assert first.module_path == P  # the call holding the pruned blocks; nothing finer is known
    assert "do_prune_layers=False" in first.reason
    full = nbtrace.compare(store("a", None, mode), store("b", "layer1_transposed_o", mode), rename=rename)
    assert full.first_divergence.module_path == BUGS["layer1_transposed_o"] and full.first_divergence.exact


@pytest.mark.parametrize("prune_a,prune_b", [(True, False), (False, True)])
@pytest.mark.parametrize("rename", [None, RENAME], ids=["aligned", "renamed"])
def test_traces_pruned_differently(store, prune_a, prune_b, rename):
    a = store("a", None, "repr", prune=prune_a)
    faithful = nbtrace.compare(a, store("b", None, "repr", prune=prune_b), rename=rename)
    assert faithful.agree and faithful.first_divergence is None
    set_aside = faithful.alignment.pruned_b if prune_a else faithful.alignment.pruned_a
    assert {n.module_path.rsplit(".layers.", 1)[-1].split(".")[0] for n in set_aside if ".layers." in n.module_path} \
        <= {"1"}
    if prune_b:  # a's layer 1 is there, b's is not: no data, not "only in a"
        report = {n.module_path: r for n, r in zip(a.nodes(), faithful.node_report())}
        assert report[f"{P}.layers.1"]["status"] == "no_data"
    for bug in ("transposed_o", "gate_up_swapped", "eps"):
        result = nbtrace.compare(a, store("b", bug, "repr", prune=prune_b), rename=rename)
        assert result.first_divergence.module_path == BUGS[bug]


def test_comparison_html_and_table_of_a_port(store):
    a, b = store("a", None, "repr"), store("b", "gate_up_swapped", "repr")
    result = nbtrace.compare(a, b)
    html = result._repr_html_()
    assert f"{P}.layers.2.mlp" in html and "<script" not in html.lower()
    df = result.to_dataframe()
    assert "only_b" in set(df.status)  # b's fused gate_up and friends
    assert set(df[df.status == "first"].module_path) == {f"{P}.layers.2.mlp"}
