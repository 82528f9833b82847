"""compare on a real port: transformers' Llama (the original) against a from-scratch port with other names and
structure (fused qkv and gate/up, an extra wrapper, an attention-core module, an extra Dropout and Identity,
another root class), loading the same weights. Traced as a user traces (``nbtrace.trace``'s defaults: the float64
twin recorded), each injected bug that changes the function must be named at the module of the original where it
originates — with and without ``rename``, with full tensors (safetensors), printed values (repr) and stats only
(SUMMARY) — and the faithful port must agree. Traced without the twin, printed values and stats never name a
module on a per-element tolerance alone: the verdict is "unresolved" there.
"""

from __future__ import annotations


import pytest

import nbtrace
from tests.models.ports import BUGS, P, RENAME, ROOT, trace_original, trace_port

# mode -> (use_repr, which file to load)
MODES = {"safetensors": (False, "FULL_TENSORS"), "repr": (True, "FULL_TENSORS"), "stats": (True, "SUMMARY")}
#: a softmax computed in float16 inside a float32 model rounds more but computes the same function: a precision
#: difference, not a bug of the function (test_a_softmax_in_float16_is_the_same_function)
PRECISION = {"softmax_fp16"}
SINGLE_LAYER_BUGS = [bug for bug in BUGS if bug != "layer1_transposed_o" and bug not in PRECISION]
#: bugs that need an original with another MLP activation (a tanh GELU differs only from an exact GELU)
ACTIVATION = {"gelu_tanh": "gelu"}


def _load(folder, cls, kind):
    return nbtrace.load_trace(folder / f"{cls}_debug_tree_{kind}.json")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Traces on disk, made once per (side, bug, mode-recording, prune, the original's MLP activation)."""
    base = tmp_path_factory.mktemp("ports")
    made: dict = {}

    def get(side: str, bug: str | None, mode: str, prune: bool = False, act: str = "silu", twin: bool = True):
        use_repr, kind = MODES[mode]
        key = (side, bug, use_repr, prune, act, twin)
        folder = base / f"{side}-{bug}-{'repr' if use_repr else 'st'}-{'prune' if prune else 'full'}-{act}-{twin}"
        measure = "auto" if twin else False
        if key not in made:
            if side == "a":
                trace_original(folder, use_repr=use_repr, prune=prune, hidden_act=act, measure_rounding=measure)
            else:
                trace_port(folder, [bug] if bug else [], use_repr=use_repr, prune=prune, hidden_act=act,
                           measure_rounding=measure)
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
@pytest.mark.parametrize(("bug", "mode"), [(bug, mode) for bug in SINGLE_LAYER_BUGS for mode in MODES])
def test_bug_is_named_where_it_originates(store, bug, mode, rename):
    act = ACTIVATION.get(bug, "silu")
    a, b = store("a", None, mode, act=act), store("b", bug, mode, act=act)
    result = nbtrace.compare(a, b, rename=rename)
    first = result.first_divergence
    assert first is not None, f"{bug} not detected: {result.summary()}"
    assert first.module_path == BUGS[bug], str(first)
    assert first.exact and result.decided_by == "float64 twins"
    assert result.agree is False
    report = {node.module_path: row for node, row in zip(result.a.nodes(), result.node_report())}
    assert report[BUGS[bug]]["status"] == "first"
    assert [p for p, row in report.items() if row["status"] == "first"] == [BUGS[bug]]
    # the numbers of the tensor it was seen in, as the files hold it (a call with children keeps no output: its
    # float64 twins' fingerprints are all there is)
    assert first.basis in ({"safetensors": "tensors", "repr": "printed", "stats": "stats"}[mode], "twin")


@pytest.mark.parametrize("mode", list(MODES))
def test_a_softmax_in_float16_is_the_same_function(store, mode):
    """A softmax computed in float16 inside a float32 model rounds at float16's 2^-11 where the original rounds at
    float32's 2^-24, but it is the same function: its float64 twin, float64 through the ``.half()``, is the
    original's. The verdict agrees; a precision loss is named only on a rule no correct kernel breaks (TF32 matmuls
    round as coarsely), and this one is finite."""
    result = nbtrace.compare(store("a", None, mode), store("b", "softmax_fp16", mode))
    assert result.verdict == "agree" and result.decided_by == "float64 twins", result.summary()
    assert result.precision == []


@pytest.mark.parametrize("mode", ["repr", "stats"])
@pytest.mark.parametrize("bug", ["gelu_tanh", "rounded_scale", "rotary_k", "eps"])
def test_printed_values_without_a_twin_name_no_module_on_a_tolerance(store, mode, bug):
    """Traced without the twin, a printed value or a stat beyond the per-element tolerance is something a correct
    kernel's rounding can produce: the verdict is "unresolved" there (where, by how much, what would decide), never
    a module named; with the twin the same traces name the bug's module."""
    act = ACTIVATION.get(bug, "silu")
    a, b = store("a", None, mode, act=act, twin=False), store("b", bug, mode, act=act, twin=False)
    result = nbtrace.compare(a, b)
    assert result.first_divergence is None and result.verdict == "unresolved", result.summary()
    where, why = result.unresolved
    assert where.startswith(P) and "tolerance" in why and "float64 twin" in why
    twinned = nbtrace.compare(store("a", None, mode, act=act), store("b", bug, mode, act=act))
    assert twinned.first_divergence.module_path == BUGS[bug]


@pytest.mark.parametrize("mode", ["safetensors", "repr"])
def test_numbers_and_counterpart(store, mode):
    a, b = store("a", None, mode), store("b", "rotary_k", mode)
    if mode == "safetensors":  # full tensors without the twin, nothing measured: unresolved there, its numbers said
        plain = nbtrace.compare(store("a", None, mode, twin=False), store("b", "rotary_k", mode, twin=False))
        assert plain.unresolved[0] == f"{P}.layers.0.self_attn" and "differs by" in plain.unresolved[1]
    result = nbtrace.compare(a, b, rename=RENAME)
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


@pytest.mark.parametrize("rename", [None, RENAME], ids=["aligned", "renamed"])
@pytest.mark.parametrize("mode", ["safetensors", "repr"])
def test_bug_inside_a_pruned_layer_is_bracketed(store, mode, rename):
    a, b = store("a", None, mode, prune=True), store("b", "layer1_transposed_o", mode, prune=True)
    result = nbtrace.compare(a, b, rename=rename)
    first = result.first_divergence
    assert first is not None, result.summary()
    # the files hold nothing of layer 1, the float64 twins do: the module is named, the tree marks what holds it
    assert first.exact and first.module_path == BUGS["layer1_transposed_o"], str(first)
    assert first.node.module_path == P and "pruning left" in first.reason
    plain_a = store("a", None, mode, prune=True, twin=False)
    plain = nbtrace.compare(plain_a, store("b", "layer1_transposed_o", mode, prune=True, twin=False), rename=rename)
    if plain.first_divergence is None:  # full tensors, nothing measured: unresolved at the call holding the blocks
        assert plain.verdict == "unresolved" and plain.unresolved[0] == P, plain.summary()
    else:  # printed values: the weights' fingerprints name the pruned module; or bracketed between kept blocks
        assert plain.first_divergence.module_path in (BUGS["layer1_transposed_o"], P)
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
