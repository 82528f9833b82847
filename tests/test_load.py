"""load_trace: FULL, SUMMARY or folder give the recorded Trace; every broken input is a TraceFormatError."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import nbtrace
from nbtrace.demo import build_demo

FULL = "DemoLM_debug_tree_FULL_TENSORS.json"
SUMMARY = "DemoLM_debug_tree_SUMMARY.json"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folders = {}
    traces = {}
    model, inputs = build_demo(num_layers=3)
    for use_repr in (True, False):
        folder = tmp_path_factory.mktemp(f"repr{use_repr}")
        with nbtrace.trace(model, debug_path=folder, use_repr=use_repr) as rec:
            model(**inputs)
        folders[use_repr], traces[use_repr] = folder, rec.trace
    return folders, traces


@pytest.mark.parametrize("use_repr", [True, False])
def test_full_file_and_folder_load_equal_to_the_recorded_trace(recorded, use_repr):
    folders, traces = recorded
    for target in (folders[use_repr], folders[use_repr] / FULL, str(folders[use_repr] / FULL)):
        loaded = nbtrace.load_trace(target)
        assert loaded == traces[use_repr]
        assert loaded.kind == "full"
        assert [n.module_path for n in loaded.nodes()] == [n.module_path for n in traces[use_repr].nodes()]


def test_summary_has_the_same_tree_and_stats_without_values(recorded):
    folders, traces = recorded
    summary = nbtrace.load_trace(folders[True] / SUMMARY)
    assert summary.kind == "summary"
    full = traces[True]
    assert [n.module_path for n in summary.nodes()] == [n.module_path for n in full.nodes()]
    for a, b in zip(full.nodes(), summary.nodes()):
        for (io_a, arg_a, ta), (io_b, arg_b, tb) in zip(a.tensors(), b.tensors()):
            assert (io_a, arg_a, ta.shape, ta.dtype, ta.mean, ta.std) == (io_b, arg_b, tb.shape, tb.dtype, tb.mean, tb.std)
            assert tb.value is None and ta.value is not None


def test_loaded_safetensors_resolve_lazily_to_the_real_tensors(recorded, tmp_path):
    folders, _ = recorded
    moved = tmp_path / "moved"
    shutil.copytree(folders[False], moved)  # references are relative to the file's folder
    t = nbtrace.load_trace(moved)
    out = t["DemoLM.lm_head"].outputs
    assert out.path.parent == moved
    tensor = out.load()
    assert tensor.shape == out.shape and tensor.dtype == torch.float32
    assert tensor.mean().item() == pytest.approx(out.mean, rel=1e-4)


def test_a_missing_safetensors_file_is_a_format_error_naming_it(recorded, tmp_path):
    folders, _ = recorded
    copy = tmp_path / "copy"
    shutil.copytree(folders[False], copy)
    (copy / "DemoLM.lm_head_outputs.safetensors").unlink()
    out = nbtrace.load_trace(copy)["DemoLM.lm_head"].outputs
    with pytest.raises(nbtrace.TraceFormatError, match="DemoLM.lm_head_outputs.safetensors.*missing"):
        out.load()
    (copy / "DemoLM.norm_outputs.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(nbtrace.TraceFormatError, match="DemoLM.norm_outputs.safetensors"):
        nbtrace.load_trace(copy)["DemoLM.norm"].outputs.load()


def test_values_of_a_repr_trace_cannot_be_loaded_as_tensors(recorded):
    folders, traces = recorded
    with pytest.raises(nbtrace.TraceFormatError, match="no safetensors file"):
        traces[True]["DemoLM.norm"].outputs.load()


def good_tree(recorded) -> dict:
    folders, _ = recorded
    return json.loads((folders[True] / FULL).read_text())


def broken_trees(tree: dict):
    yield "not an object", "[1, 2]", "top"
    yield "truncated", json.dumps(tree, indent=2)[:500], "not valid JSON"
    yield "empty", "", "is empty"
    yield "binary", "\udcff", None
    no_path = dict(tree)
    del no_path["module_path"]
    yield "no module_path", json.dumps(no_path), "module_path"
    bad_children = dict(tree, children={"a": 1})
    yield "children not a list", json.dumps(bad_children), "children"
    child_not_obj = dict(tree, children=[1])
    yield "child not an object", json.dumps(child_not_obj), r"children\[0\]"
    bad_shape = json.loads(json.dumps(tree))
    bad_shape["children"][0]["outputs"]["shape"] = "torch.Size([1, x])"
    yield "bad shape", json.dumps(bad_shape), "bad tensor shape"
    bad_value = json.loads(json.dumps(tree))
    bad_value["children"][0]["outputs"]["value"] = 42
    yield "bad value", json.dumps(bad_value), "value"
    bad_stat = json.loads(json.dumps(tree))
    bad_stat["children"][0]["outputs"]["mean"] = 0.5
    yield "bad stat", json.dumps(bad_stat), "mean"
    number = json.loads(json.dumps(tree))
    number["children"][0]["inputs"]["args"][0] = 12
    yield "number leaf", json.dumps(number), "unexpected int"
    bad_error = dict(tree, error="boom")
    yield "bad error", json.dumps(bad_error), "error"


def test_every_broken_file_is_a_format_error_naming_the_file(recorded, tmp_path):
    tree = good_tree(recorded)
    for label, text, expected in broken_trees(tree):
        path = tmp_path / f"{label.replace(' ', '_')}{FULL[len('DemoLM'):]}"
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        with pytest.raises(nbtrace.TraceFormatError) as caught:
            nbtrace.load_trace(path)
        message = str(caught.value)
        assert str(path) in message, label
        if expected:
            assert pytest.importorskip("re").search(expected, message), (label, message)


def test_missing_paths_and_folders_without_traces(tmp_path):
    with pytest.raises(nbtrace.TraceFormatError, match="no such file"):
        nbtrace.load_trace(tmp_path / "nope.json")
    with pytest.raises(nbtrace.TraceFormatError, match="holds no"):
        nbtrace.load_trace(tmp_path)
    for cls in ("A", "B"):
        (tmp_path / f"{cls}{FULL[len('DemoLM'):]}").write_text('{"module_path": "%s"}' % cls)
    with pytest.raises(nbtrace.TraceFormatError, match="several models"):
        nbtrace.load_trace(tmp_path)


def test_a_folder_with_only_a_summary_loads_it(recorded, tmp_path):
    folders, _ = recorded
    shutil.copy(folders[True] / SUMMARY, tmp_path / SUMMARY)
    assert nbtrace.load_trace(tmp_path).kind == "summary"


def test_a_deep_tree_loads(tmp_path):
    depth = 400  # JSON nests two levels per call; json itself stops near 1000
    text = "".join('{"module_path": "M%s", "children": [' % (".x" * d) for d in range(depth))
    text += '{"module_path": "M%s"}' % (".x" * depth) + "]}" * depth
    path = tmp_path / "M_debug_tree_SUMMARY.json"
    path.write_text(text)
    t = nbtrace.load_trace(path)
    assert len(t) == depth + 1 and t.nodes()[-1].depth == depth
    assert t.nodes()[-1].parent is t.nodes()[-2]
