"""TraceView, Python side: what the payload and the detail replies tell the front end, for real traces."""

from __future__ import annotations

import json

import pytest
import torch
import traitlets
from tests.models.core_models import CalledTwice, FailingLayer, seeded
from tests.models.widget_models import Exploding, FakeComparison, NanNet, demo_trace, record

import nbtrace
from nbtrace.notebook import payload as P
from nbtrace.notebook.view import TraceView


def rows_by_path(view: TraceView) -> dict[str, int]:
    """Row of the first call of each module path."""
    found: dict[str, int] = {}
    for row, node in enumerate(view._row_nodes):
        if node is not None:
            found.setdefault(node.module_path, row)
    return found


def detail_reply(view: TraceView, row: int) -> dict:
    """Send the front end's request to the kernel-side handler and return its reply."""
    sent: list[dict] = []
    view.send = lambda content, buffers=None: sent.append(content)  # type: ignore[method-assign]
    view._on_frontend_msg(view, {"type": "detail", "row": row}, [])
    assert len(sent) == 1
    return sent[0]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_trace(tmp_path_factory.mktemp("demo"))


def test_rows_cover_every_call_and_the_pruned_layers(demo):
    view = TraceView(demo)
    rows = view.rows
    assert rows["model"] == "DemoLM" and rows["calls_total"] == len(demo) == 31
    gaps = [r for r, f in enumerate(rows["flags"]) if f & P.GAP]
    assert len(gaps) == 1
    assert rows["strings"][rows["seg"][gaps[0]]] == "layers 1–2 pruned"
    assert len(rows["depth"]) == len(demo) + 1
    # every call's row shows its relative name and its first output
    by_path = rows_by_path(view)
    q = by_path["DemoLM.layers.0.self_attn.q_proj"]
    assert rows["strings"][rows["seg"][q]] == "q_proj"
    assert rows["strings"][rows["output"][q]] == "1×16×64 float32"
    node = demo["DemoLM.layers.0.self_attn.q_proj"]
    assert rows["mean"][q] == pytest.approx(node.output_tensors()[0].mean, rel=5e-3)
    assert rows["expand_depth"] == 2


def test_initial_payload_is_compact_json_without_values(demo):
    view = TraceView(demo)
    assert json.loads(view.payload) == view.rows
    assert "tensor([[" not in view.payload  # printed values come on demand only
    assert view.payload == json.dumps(view.rows, separators=(",", ":"), ensure_ascii=False)  # compact separators


def test_detail_reply_has_every_input_and_output_with_values(demo):
    view = TraceView(demo)
    row = rows_by_path(view)["DemoLM.layers.0.mlp.down_proj"]
    reply = detail_reply(view, row)
    assert reply["type"] == "detail" and reply["row"] == row
    detail = reply["detail"]
    assert detail["path"] == "DemoLM.layers.0.mlp.down_proj"
    ios = [(t["io"], t["arg"], t["shape"]) for t in detail["tensors"]]
    assert ios == [("input", "args.0", [1, 16, 172]), ("output", "out", [1, 16, 64])]
    out = detail["tensors"][1]
    assert {"mean", "std", "min", "max"} <= out.keys() and all(out[k] for k in ("mean", "std", "min", "max"))
    assert out["lines"] and out["lines"][0].startswith("tensor(")


def test_detail_of_a_safetensors_trace_names_the_file(tmp_path):
    trace = demo_trace(tmp_path, use_repr=False)
    view = TraceView(trace)
    detail = view.detail(rows_by_path(view)["DemoLM.lm_head"])
    out = [t for t in detail["tensors"] if t["io"] == "output"][0]
    assert out["file"].endswith(".safetensors") and out["file_exists"] is True
    assert "lines" not in out


def test_detail_request_for_a_bad_row_answers_with_an_error(demo):
    view = TraceView(demo)
    reply = detail_reply(view, 10_000)
    assert "out of range" in reply["error"]


def test_nan_calls_are_flagged_and_their_ancestors_know(tmp_path):
    trace = record(seeded(NanNet), -torch.ones(2, 6) * 5, folder=tmp_path)
    view = TraceView(trace)
    rows, by_path = view.rows, rows_by_path(view)
    first = trace.first_nonfinite()
    assert first is not None
    assert rows["first_nonfinite"] == by_path[first.module_path]
    assert rows["flags"][by_path[first.module_path]] & P.FIRST_NONFINITE
    assert rows["flags"][by_path["NanNet"]] & P.HAS_NONFINITE_BELOW
    assert not rows["flags"][by_path["NanNet.encoder.proj"]] & P.NONFINITE


def test_error_calls_are_flagged(tmp_path):
    model = seeded(FailingLayer)
    trace = record(model, torch.ones(2, 4), folder=tmp_path)
    view = TraceView(trace)
    rows = view.rows
    assert rows["innermost_error"] >= 0
    assert rows["flags"][rows["innermost_error"]] & P.ERROR
    detail = view.detail(rows["innermost_error"])
    assert detail["error"]["message"].startswith("layer two exploded")


def test_repeated_calls_carry_their_count(tmp_path):
    trace = record(seeded(CalledTwice), torch.ones(2, 4), folder=tmp_path)
    view = TraceView(trace)
    acts = [c for c in view.rows["calls"] if view._row_nodes[c[0]].module_path == "CalledTwice.act"]
    assert [(k, total) for _, k, total in acts] == [(0, 2), (1, 2)]
    # selecting the second call from the front end keeps that exact call
    view.set_state({"selected_row": acts[1][0], "selected": "CalledTwice.act"})
    assert view.selected_node is view._row_nodes[acts[1][0]]
    assert view.selected_node.call_index == 1
    assert view.detail(acts[1][0])["call"] == 1 and view.detail(acts[1][0])["calls"] == 2


def test_a_jump_of_scale_is_flagged(tmp_path):
    trace = record(seeded(Exploding), torch.randn(4, 8), folder=tmp_path)
    view = TraceView(trace)
    flags, by_path = view.rows["flags"], rows_by_path(view)
    assert flags[by_path["Exploding.boost"]] & P.JUMP_BIG and flags[by_path["Exploding.boost"]] & P.JUMP_UP
    assert not flags[by_path["Exploding.proj"]] & (P.JUMP_SMALL | P.JUMP_BIG)


def test_selected_from_python_finds_the_row(demo):
    view = TraceView(demo)
    view.selected = "DemoLM.layers.3.mlp"
    assert view._row_nodes[view.selected_row].module_path == "DemoLM.layers.3.mlp"
    assert view.selected_node is demo["DemoLM.layers.3.mlp"]
    with pytest.raises(traitlets.TraitError, match="no module call 'DemoLM.nope'"):
        view.selected = "DemoLM.nope"
    assert view.selected == "DemoLM.layers.3.mlp"
    view.selected = ""
    assert view.selected_row == -1 and view.selected_node is None


def test_accepts_a_path_and_names_bad_input(tmp_path, demo):
    view = TraceView(demo.source.parent)
    assert view.trace == demo
    with pytest.raises(TypeError, match=r"TraceView needs a Trace, a path .* or a comparison .*got int"):
        TraceView(42)
    with pytest.raises(nbtrace.TraceFormatError, match="no such file"):
        TraceView(tmp_path / "missing")
    (tmp_path / "X_debug_tree_FULL_TENSORS.json").write_text("{not json")
    with pytest.raises(nbtrace.TraceFormatError, match="not valid JSON"):
        TraceView(tmp_path)


def test_lazy_public_name():
    assert nbtrace.TraceView is TraceView


def test_comparison_colours_rows_and_selects_the_first_divergence(demo):
    comparison = FakeComparison(demo, demo, "DemoLM.layers.3.self_attn.o_proj")
    view = TraceView(comparison)
    rows = view.rows
    first = rows["first_divergence"]
    assert view._row_nodes[first].module_path == "DemoLM.layers.3.self_attn.o_proj"
    assert rows["status"][first] == P.STATUS_CODES["first"]
    assert view.selected == "DemoLM.layers.3.self_attn.o_proj" and view.selected_row == first
    detail = view.detail(first)
    compared = detail["comparison"]
    assert compared["status"] == "first" and compared["b_path"] == "DemoLM.layers.3.self_attn.o_proj"
    assert compared["situation"] == "the difference is born here: this call's code makes it"
    assert compared["tensors"] == {} and compared["difference"] is None  # a stand-in has no numbers: none shown


def test_comparison_with_a_wrong_report_is_refused(demo):
    comparison = FakeComparison(demo, demo, "DemoLM.norm")
    comparison._report = comparison._report[:3]
    with pytest.raises(ValueError, match="node_report"):
        TraceView(comparison)


def test_mimebundle_has_the_widget_and_a_static_fallback(demo):
    data, _ = TraceView(demo)._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    assert "q_proj" in data["text/html"] and "<script" not in data["text/html"]


def test_jumps_compare_a_module_with_itself_in_the_previous_layer(tmp_path):
    from nbtrace.demo import build_demo

    model, inputs = build_demo(num_layers=5)
    with torch.no_grad():
        model.layers[2].mlp.down_proj.weight.mul_(50.0)
    with nbtrace.trace(model, debug_path=tmp_path, do_prune_layers=False) as rec:
        model(**inputs)
    view = TraceView(rec.trace)
    flags, by_path = view.rows["flags"], rows_by_path(view)
    jumped = sorted(path for path, row in by_path.items() if flags[row] & (P.JUMP_SMALL | P.JUMP_BIG))
    # every layer's first norm follows the small residual update of the previous layer's last projection:
    # in call order that looks like a 10x jump, but it is not one
    # the boosted layer jumps up against layer 1; layer 3 drops back against it
    assert jumped == ["DemoLM.layers.2.mlp.down_proj", "DemoLM.layers.3.mlp.down_proj"]
    assert flags[by_path["DemoLM.layers.2.mlp.down_proj"]] & P.JUMP_UP
    assert not flags[by_path["DemoLM.layers.3.mlp.down_proj"]] & P.JUMP_UP
