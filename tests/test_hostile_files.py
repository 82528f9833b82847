"""Trace files are untrusted input: loading one never reads outside its folder, and every malformed file
is a TraceFormatError that names the file and the place (never a RecursionError, KeyError, ...)."""

from __future__ import annotations

import json
import os
import random

import pytest
import torch
from safetensors.torch import save_file

import nbtrace
from nbtrace import TraceFormatError
from nbtrace.demo import build_demo

FULL = "DemoLM_debug_tree_FULL_TENSORS.json"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A real safetensors trace of the demo model: its JSON text and its folder."""
    folder = tmp_path_factory.mktemp("good")
    model, inputs = build_demo(num_layers=2)
    with nbtrace.trace(model, debug_path=folder, use_repr=False):
        model(**inputs)
    return folder, (folder / FULL).read_text()


def _write(folder, tree_or_text) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    text = tree_or_text if isinstance(tree_or_text, str) else json.dumps(tree_or_text)
    (folder / FULL).write_text(text)


def _first_tensor(tree):
    """The first tensor record of a tree (to tamper with)."""
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "shape" in item and "dtype" in item:
                return item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    raise AssertionError("no tensor record")


@pytest.mark.parametrize(
    "ref",
    ["../secret.safetensors", "./../secret.safetensors", "/etc/passwd", "./sub/x.safetensors", "./..", "./",
     "secret.safetensors", "./a\\..\\b.safetensors"],
)
def test_a_reference_that_points_elsewhere_is_refused_at_load(good, tmp_path, ref):
    _, text = good
    tree = json.loads(text)
    _first_tensor(tree)["value"] = ref
    outside = tmp_path / "secret.safetensors"
    save_file({"data": torch.ones(2)}, str(outside))
    _write(tmp_path / "trace", tree)
    with pytest.raises(TraceFormatError, match="reference") as info:
        nbtrace.load_trace(tmp_path / "trace")
    assert FULL in str(info.value) and "root" in str(info.value)  # names the file and the place


def test_a_linked_tensor_file_is_not_followed(good, tmp_path):
    folder, text = good
    trace_dir = tmp_path / "trace"
    _write(trace_dir, text)
    secret = tmp_path / "secret.safetensors"
    save_file({"data": torch.full((3,), 7.0)}, str(secret))
    tree = json.loads(text)
    ref = _first_tensor(tree)["value"]
    os.symlink(secret, trace_dir / ref[2:])
    trace = nbtrace.load_trace(trace_dir)
    tensor = next(t for node in trace.nodes() for _, _, t in node.tensors() if t.ref == ref)
    with pytest.raises(TraceFormatError, match="link"):
        tensor.load()


def test_a_linked_json_in_a_folder_is_not_followed(good, tmp_path):
    folder, _ = good
    (tmp_path / "trace").mkdir()
    os.symlink(folder / FULL, tmp_path / "trace" / FULL)
    with pytest.raises(TraceFormatError, match="link"):
        nbtrace.load_trace(tmp_path / "trace")


def test_deep_nesting_is_a_format_error_not_a_recursion_error(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    _write(tmp_path / "json", '{"module_path": "M", "inputs": ' + deep + "}")
    with pytest.raises(TraceFormatError, match="nest"):
        nbtrace.load_trace(tmp_path / "json")
    value = "x"
    for _ in range(500):  # deep but within json's own limit: the tree builder refuses it
        value = [value]
    _write(tmp_path / "tree", {"module_path": "M", "inputs": {"args": value}})
    with pytest.raises(TraceFormatError, match="nests deeper"):
        nbtrace.load_trace(tmp_path / "tree")
    depth = 300  # a deep call tree (within json's own nesting limit) is legal and loads
    text = "".join(f'{{"module_path": "M{"." + str(i) if i else ""}", "children": [' for i in range(depth))
    text += '{"module_path": "M.leaf"}' + "]}" * depth
    _write(tmp_path / "calls", text)
    assert len(nbtrace.load_trace(tmp_path / "calls")) == depth + 1


def test_huge_numbers_and_bad_bytes(tmp_path):
    _write(tmp_path / "a", '{"module_path": "M", "x": ' + "9" * 10_000 + "}")
    with pytest.raises(TraceFormatError, match="valid JSON"):
        nbtrace.load_trace(tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / FULL).write_bytes(b'{"module_path": "\xff\xfe"}')
    with pytest.raises(TraceFormatError):
        nbtrace.load_trace(tmp_path / "b")


def _mutations(tree, rng: random.Random):
    """Trees with one value somewhere swapped for a value of another type."""
    places = []
    stack = [(tree, [])]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                places.append(path + [key])
                stack.append((value, path + [key]))
        elif isinstance(item, list):
            for i, value in enumerate(item):
                places.append(path + [i])
                stack.append((value, path + [i]))
    swaps = [None, 1, 2.5, True, "text", [], {}, ["x", 3], {"shape": 5}, {"shape": "torch.Size([x])", "dtype": "f"}]
    for path in rng.sample(places, min(120, len(places))):
        for swap in rng.sample(swaps, 3):
            copy = json.loads(json.dumps(tree))
            target = copy
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = swap
            yield copy


def test_fuzz_type_swaps_and_truncations(good, tmp_path):
    """Every mutated or truncated file loads or fails with TraceFormatError, and what loads can be used."""
    _, text = good
    tree = json.loads(text)
    rng = random.Random(0)
    outcomes = {"loaded": 0, "refused": 0}
    for i, mutated in enumerate(_mutations(tree, rng)):
        folder = tmp_path / f"m{i % 8}"
        _write(folder, mutated)
        try:
            trace = nbtrace.load_trace(folder)
        except TraceFormatError as exc:
            assert FULL in str(exc)
            outcomes["refused"] += 1
            continue
        outcomes["loaded"] += 1
        trace.to_dict(), len(trace), trace.first_nonfinite(), [n.tensors() for n in trace.nodes()]
    for cut in sorted(rng.sample(range(1, len(text)), 60)):
        _write(tmp_path / "cut", text[:cut])
        with pytest.raises(TraceFormatError, match="valid JSON|must hold|empty"):
            nbtrace.load_trace(tmp_path / "cut")
    assert outcomes["refused"] > 50 and outcomes["loaded"] > 10  # the fuzzing reached both outcomes
