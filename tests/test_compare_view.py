"""TraceView of a comparison, from Python: what the payload and the detail pane carry (the porter of issue 9),
where the jump marks go, that a finite mask whose mean overflowed is no NaN, and the offline fallback."""

from __future__ import annotations

import json

import pytest
import torch
from tests.models.contract import porter_comparison
from tests.models.core_models import seeded
from tests.models.generation import Bug, build_reference, make_port, make_prompt, trace_generate
from tests.models.ports import BUGS, P
from tests.models.widget_models import Exploding, record

import nbtrace
from nbtrace.notebook import payload as rows
from nbtrace.notebook.view import TraceView
from nbtrace.render.verdict import verdict_words


@pytest.fixture(scope="module")
def porter(tmp_path_factory):
    return porter_comparison(tmp_path_factory.mktemp("porter"))


@pytest.fixture(scope="module")
def view(porter):
    return TraceView(porter)


@pytest.fixture(scope="module")
def tolerance_view(tmp_path_factory):
    """The same porter judged by a per-element tolerance (``rtol`` given): no own vs inherited difference."""
    return TraceView(porter_comparison(tmp_path_factory.mktemp("tolerance"), rtol=1e-5))


def row_of(view: TraceView, path: str) -> int:
    return view._row_of_node[id(view.trace[path])]


def test_the_header_names_b_and_the_verdict(view, porter):
    compare = view.rows["compare"]
    assert (compare["a_model"], compare["b_model"], compare["b_calls"]) == ("LlamaForCausalLM", "TinyLlamaPort", len(porter.b))
    verdict = compare["verdict"]
    assert verdict["verdict"] == "diverge" and verdict["word"] == "diverge" and verdict["mark"] == "✗"
    assert verdict["divergence"]["module_path"] == BUGS["rounded_scale"]
    assert verdict["divergence"]["evidence"][0]["line"] == verdict_words(porter).divergence.evidence[0].line


def test_the_first_divergence_row_shows_the_reason_the_evidence_and_where_it_was_seen(view, porter):
    first = porter.first_divergence
    detail = view.detail(view.rows["first_divergence"])["comparison"]
    assert detail["status"] == "first" and detail["b_path"] == "TinyLlamaPort.blocks.2.attn"
    divergence = detail["divergence"]
    assert divergence["reason"] == first.reason
    # the twins agree up to the attention's input and differ at its output projection's input: its own code
    assert divergence["seen_at"] == f"{P}.layers.2.self_attn.o_proj input args.0"
    assert divergence["evidence"][0].startswith("twin: the two float64 twins differ by")
    assert "own float64 precision, measured" in divergence["evidence"][0]
    observed = divergence["observed"]
    assert observed["path"] == f"{P}.layers.2.self_attn.o_proj" and observed["b_path"] == "TinyLlamaPort.blocks.2.attn.out.linear"
    seen = next(t for t in observed["tensors"] if t["io"] == "input")
    assert seen["verdict"] == "differs" and "max_rel=" in seen["numbers"]
    # the blamed call's own inputs agree: each tensor says so, rather than one number that reads like the evidence
    own = detail["tensors"]["input kwargs.hidden_states"]
    assert own["verdict"] == "ok" and own["b_arg"] == "args.0"
    # its own difference, measured against its inputs', is what the detail says
    assert detail["difference"]["line"].startswith("own ") and " u · inherited 0 u · " in detail["difference"]["line"]


def test_a_tolerance_s_first_divergence_shows_the_tolerance(tolerance_view):
    detail = tolerance_view.detail(tolerance_view.rows["first_divergence"])["comparison"]
    divergence = detail["divergence"]
    assert divergence["evidence"][0].startswith("tolerance: the largest relative difference of input args.0 is")
    assert "beyond the tolerance 1e-05 for float32" in divergence["evidence"][0]
    seen = next(t for t in divergence["observed"]["tensors"] if t["io"] == "input")
    assert seen["verdict"] == "differs" and seen["tolerance"] == "1.00e-05" and "max_rel=" in seen["numbers"]
    assert detail["difference"] is None


def test_the_initial_detail_travels_with_the_payload(view):
    shipped = view.rows["initial_detail"]
    assert shipped["row"] == view.rows["first_divergence"]
    assert shipped["detail"]["comparison"]["divergence"]["reason"]


def test_the_root_says_a_call_inside_differs_not_a_difference_of_zero(view, porter):
    detail = view.detail(0)["comparison"]
    assert detail["status"] == "diverged"
    assert detail["situation"] == "its own tensors agree; a call inside it differs"
    assert all(t["verdict"] == "ok" for t in detail["tensors"].values())
    o_proj = view.detail(row_of(view, f"{P}.layers.2.self_attn.o_proj"))["comparison"]
    assert o_proj["situation"] == "its tensors differ from b's"


def test_the_tree_s_difference_cell_says_b_s_values_too(view, tolerance_view):
    from nbtrace.render.vocabulary import format_number

    for shown, start in ((view, "own "), (tolerance_view, "largest relative difference ")):
        cells = {shown._row_nodes[row].module_path: tooltip
                 for row, _, _, _, tooltip in shown.rows["compare"]["difference"]["cells"]}
        b_out = shown.comparison.match_of(shown.trace[f"{P}.layers.2.self_attn.o_proj"]).b.output_tensors()[0]
        assert cells[f"{P}.layers.2.self_attn.o_proj"].endswith(
            f" · b: mean {format_number(b_out.mean)} std {format_number(b_out.std)}")
        assert cells[f"{P}.layers.2.self_attn.o_proj"].startswith(start)


def test_b_s_tensors_stand_beside_a_s(view):
    detail = view.detail(row_of(view, f"{P}.layers.2.self_attn.o_proj"))
    pair = detail["comparison"]["tensors"]["output out"]
    b = pair["b_detail"]
    assert b["arg"] == "out" and b["file"].startswith("./TinyLlamaPort.blocks.2.attn.out.linear_outputs")
    assert pair["a"]["mean"] == next(t for t in detail["tensors"] if t["io"] == "output")["mean"]
    assert pair["b"]["std"] == b["std"] and pair["verdict"] == "differs"
    # judged against rounding by where the difference flows: no per-element tolerance shown as if it had decided
    assert pair["tolerance"] == "-"


def test_the_verdict_s_own_difference_reaches_the_detail(view):
    detail = view.detail(row_of(view, f"{P}.layers.2.self_attn.o_proj"))["comparison"]
    difference = detail["difference"]
    assert difference["line"].startswith("own ") and " u · inherited " in difference["line"]
    assert view.rows["compare"]["difference"]["header"] == "own (u)"


def test_jumps_of_scale_stay_off_norms_and_outputs_of_another_shape(view):
    flags = view.rows["flags"]
    jumped = {view._row_nodes[row].module_path for row, _ in view.rows["jumps"]}
    assert not jumped, jumped  # rotary_emb (cos/sin of another shape), the norms (rescale by design): healthy
    for path in (f"{P}.rotary_emb", f"{P}.layers.0.input_layernorm", f"{P}.norm"):
        assert not flags[row_of(view, path)] & (rows.JUMP_SMALL | rows.JUMP_BIG), path


def test_a_real_jump_says_against_what(tmp_path):
    view = TraceView(record(seeded(Exploding), torch.randn(4, 8), folder=tmp_path))
    words = dict((view._row_nodes[row].module_path, text) for row, text in view.rows["jumps"])
    assert words == {"Exploding.boost": "scale grew 1000× against its own input"}


def test_a_jump_across_layers_names_the_previous_layer(tmp_path):
    from nbtrace.demo import build_demo

    model, inputs = build_demo(num_layers=4)
    with torch.no_grad():
        model.layers[2].mlp.down_proj.weight.mul_(50.0)
    with nbtrace.trace(model, debug_path=tmp_path, do_prune_layers=False) as rec:
        model(**inputs)
    view = TraceView(rec.trace)
    words = dict((view._row_nodes[row].module_path, text) for row, text in view.rows["jumps"])
    assert words["DemoLM.layers.2.mlp.down_proj"].startswith("scale grew ")
    assert words["DemoLM.layers.2.mlp.down_proj"].endswith(
        "× against layers.1.mlp.down_proj (the same module, one layer block earlier)")


def test_a_finite_mask_whose_mean_overflowed_is_no_nan(view):
    attention = view.trace[f"{P}.layers.0.self_attn"]
    mask = next(t for io, arg, t in attention.tensors() if arg == "kwargs.attention_mask")
    assert mask.mean == float("-inf") and mask.min is not None and mask.min > float("-inf")
    assert not view.rows["flags"][row_of(view, f"{P}.layers.0.self_attn")] & (rows.NONFINITE | rows.HAS_NONFINITE_BELOW)
    assert view.rows["first_nonfinite"] == -1
    shown = next(t for t in view.detail(row_of(view, f"{P}.layers.0.self_attn"))["tensors"]
                 if t["arg"] == "kwargs.attention_mask")
    assert shown["nonfinite"] is False and shown["mean"] == "-inf"


def test_the_offline_fallback_holds_the_verdict_and_its_evidence(view, porter):
    data, _ = view._repr_mimebundle_()
    fallback = data["text/html"]
    words = verdict_words(porter).divergence
    assert "✗ diverge" in fallback and "TinyLlamaPort" in fallback and "<script" not in fallback
    assert words.evidence[0].line in fallback.replace("&#x27;", "'")
    assert words.reason in fallback.replace("&#x27;", "'")


def test_a_run_s_view_shows_the_verdict_of_its_diverging_step(tmp_path):
    reference, prompt = build_reference(), make_prompt()
    trace_generate(reference, prompt, 3, tmp_path / "a")
    trace_generate(make_port(reference, Bug.KV_STALE), prompt, 3, tmp_path / "b")
    runs = nbtrace.compare(tmp_path / "a", tmp_path / "b")
    view = TraceView(runs)
    assert view.step == runs.first_divergence.step
    verdict = view.rows["compare"]["verdict"]
    assert verdict["verdict"] == "diverge" and verdict["divergence"]["module_path"] == runs.first_divergence.module_path
    assert verdict["divergence"]["reason"] == runs.first_divergence.reason
    detail = view.detail(view.selected_row)["comparison"]  # the call the run blames, in its step
    assert detail["status"] == "first" and detail["divergence"]["reason"] == runs.first_divergence.reason
    json.dumps(view.rows)  # plain data all the way down
