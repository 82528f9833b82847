"""Every forward of a traced block, on disk and in the Recorder: load_traces, one run per folder, and the
memory a long run keeps (earlier forwards live in their files, not in the Recorder)."""

from __future__ import annotations

import gc
import shutil
import tracemalloc

import pytest
import torch

import nbtrace
from nbtrace import TraceFormatError
from tests.models.core_models import Stack, seeded

FULL = "Stack_debug_tree_FULL_TENSORS.json"


def run(folder, forwards: int, use_repr: bool = False, model=None):
    model = model or seeded(Stack, layers=3)
    xs = [torch.full((1, 8), float(i)) for i in range(forwards)]
    with nbtrace.trace(model, debug_path=folder, use_repr=use_repr) as rec:
        for x in xs:
            model(x)
    return rec, xs


def first_input(trace) -> float:
    return float(trace["Stack.layers.0.proj"].inputs["args"][0].load()[0, 0])


def test_load_traces_reads_every_forward_in_order(tmp_path):
    rec, _ = run(tmp_path, 4)
    traces = nbtrace.load_traces(tmp_path)
    assert [first_input(t) for t in traces] == [0.0, 1.0, 2.0, 3.0]
    assert traces == list(rec.traces) and traces[-1] == nbtrace.load_trace(tmp_path)  # load_trace: the last
    assert [t.source.parent.name for t in traces[:-1]] == ["forward_0", "forward_1", "forward_2"]
    assert nbtrace.load_traces(tmp_path / FULL) == traces  # the folder's own file stands for the folder
    assert len(nbtrace.load_traces(tmp_path / "forward_1")) == 1


def test_a_folder_of_one_forward_is_a_list_of_one(tmp_path):
    run(tmp_path, 1)
    assert len(nbtrace.load_traces(tmp_path)) == 1
    assert not (tmp_path / "forward_0").exists()


def test_a_gap_in_the_forwards_is_a_format_error(tmp_path):
    run(tmp_path, 4)
    shutil.rmtree(tmp_path / "forward_1")
    with pytest.raises(TraceFormatError, match="forward_1 missing"):
        nbtrace.load_traces(tmp_path)


def test_a_new_block_removes_the_forwards_an_earlier_longer_run_left(tmp_path):
    run(tmp_path, 5)
    (tmp_path / "forward_3" / "notes.txt").write_text("mine")  # not nbtrace's: stays, and so does its folder
    run(tmp_path, 2)
    traces = nbtrace.load_traces(tmp_path)
    assert [first_input(t) for t in traces] == [0.0, 1.0]
    assert not (tmp_path / "forward_2").exists() and (tmp_path / "forward_3" / "notes.txt").read_text() == "mine"


def test_another_models_forwards_in_the_same_folder_are_left_alone(tmp_path):
    run(tmp_path, 3)
    other = torch.nn.Sequential(torch.nn.Linear(8, 8))
    with nbtrace.trace(other, debug_path=tmp_path, use_repr=False):
        other(torch.ones(1, 8))
        other(torch.ones(1, 8))
    assert len(nbtrace.load_traces(tmp_path / FULL)) == 3
    assert len(nbtrace.load_traces(tmp_path / "Sequential_debug_tree_FULL_TENSORS.json")) == 2


class Stack_2(Stack):  # noqa: N801 - a class name that starts with another's, as "Llama" and "Llama_v2" do
    pass


def test_a_model_whose_name_extends_another_keeps_its_forwards(tmp_path):
    run(tmp_path, 2, model=seeded(Stack_2, layers=3))
    run(tmp_path, 3)  # Stack's new block clears Stack's earlier forwards only
    run(tmp_path, 3)
    assert len(nbtrace.load_traces(tmp_path / "Stack_2_debug_tree_FULL_TENSORS.json")) == 2
    assert len(nbtrace.load_traces(tmp_path / FULL)) == 3


def test_forwards_of_two_runs_mixed_in_one_folder_are_refused(tmp_path):
    run(tmp_path / "one", 3)
    run(tmp_path / "two", 3)
    shutil.rmtree(tmp_path / "one" / "forward_1")
    shutil.copytree(tmp_path / "two" / "forward_1", tmp_path / "one" / "forward_1")
    with pytest.raises(TraceFormatError, match="mixes the files of several runs") as info:
        nbtrace.load_traces(tmp_path / "one")
    assert "forward_1" in str(info.value)


def test_recorder_traces_is_a_sequence_read_back_from_the_files(tmp_path):
    rec, _ = run(tmp_path, 3)
    traces = rec.traces
    assert len(traces) == 3 and rec.trace is traces[-1] is traces[2]
    assert [first_input(t) for t in traces] == [0.0, 1.0, 2.0] and traces[:2] == nbtrace.load_traces(tmp_path)[:2]
    held = traces[0]
    assert traces[0] is held  # a Trace in use is handed out again, not read twice
    assert held.source == tmp_path / "forward_0" / FULL
    assert all(node.duration is not None for node in held.nodes())  # call timings kept through the files


def _kept_after(folder, model, steps: int) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        with nbtrace.trace(model, debug_path=folder, use_repr=True) as rec:
            for _ in range(steps):
                model(torch.ones(1, 8))
        gc.collect()
        return tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        del rec


def test_a_long_run_keeps_memory_bounded(tmp_path):
    model = seeded(Stack, layers=6)
    few = _kept_after(tmp_path / "few", model, 5)
    many = _kept_after(tmp_path / "many", model, 60)
    # keeping every forward's tree in memory (as before) adds ~0.9 MB for these 55 more forwards
    assert many - few < 300_000, (few, many)
