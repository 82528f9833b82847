"""``ranks=`` and rank folders in one process (no torch.distributed): the argument, the sidecar section,
loading, and how reassembly decides a rule. The multi-process runs are in test_tensor_parallel.py."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch

import nbtrace
from nbtrace import TraceFormatError
from nbtrace.diff.ranks.reassemble import infer
from tests.models import tp_models as tm

SIDECAR = "TinyDecoder_debug_tree_NBTRACE.json"


def _record(folder, use_repr=False, **kwargs):
    model = tm.build_reference()
    with torch.no_grad(), nbtrace.trace(model, folder, use_repr=use_repr, **kwargs) as rec:
        model(tm.make_input())
    return rec


@pytest.mark.parametrize("ranks, problem", [
    (1, "1 is not a rank of this run; this process is rank 0 of 1 (torch.distributed is not initialized)"),
    ([0, 2], "2 is not a rank of this run"),
    ([0, 0], "names a rank twice"),
    ("some", "use an int, a list of ranks, or 'all'"),
    ([], "a non-empty list"),
    (True, "a non-empty list"),
])
def test_a_bad_ranks_argument_is_refused_before_anything_is_wrapped(tmp_path, ranks, problem):
    model = tm.build_reference()
    with pytest.raises(ValueError, match=re.escape(problem)), nbtrace.trace(model, tmp_path, ranks=ranks):
        pass
    assert not any("forward" in m.__dict__ for m in model.modules())
    assert not any(tmp_path.iterdir())


def test_without_torch_distributed_the_default_writes_no_distributed_section(tmp_path):
    rec = _record(tmp_path)
    assert "distributed" not in rec.trace.sidecar
    assert "distributed" not in nbtrace.load_trace(tmp_path).sidecar


def test_ranks_all_in_one_process_writes_rank_0_and_compares_whole(tmp_path):
    _record(tmp_path / "single")
    rec = _record(tmp_path / "tp", ranks="all")
    assert sorted(p.name for p in (tmp_path / "tp").iterdir()) == ["rank_0"]
    assert rec.trace.sidecar["distributed"] == {"rank": 0, "world_size": 1, "recorded_ranks": [0], "meshes": [],
                                                "tensors": {}}
    comparison = nbtrace.compare(tmp_path / "single", tmp_path / "tp")
    assert comparison.agree and comparison.compared == 57
    assert {d.rule for m in comparison.matches for d in m.diffs} == {"Replicate()"}


def test_printed_values_cannot_be_reassembled_and_say_so(tmp_path):
    _record(tmp_path / "single", use_repr=True, measure_rounding=False)
    _record(tmp_path / "tp", use_repr=True, ranks="all", measure_rounding=False)
    comparison = nbtrace.compare(tmp_path / "single", tmp_path / "tp")
    found = [d for m in comparison.matches for d in m.diffs]
    assert comparison.compared == 0 and not comparison.agree and comparison.first_divergence is None
    assert all("trace with use_repr=False" in d.problem for d in found)
    # a run of one rank holds the whole model's float64 twin: that decides, printed values or not
    _record(tmp_path / "single_twin", use_repr=True)
    _record(tmp_path / "tp_twin", use_repr=True, ranks="all")
    twins = nbtrace.compare(tmp_path / "single_twin", tmp_path / "tp_twin")
    assert (twins.verdict, twins.decided_by) == ("agree", "float64 twins"), twins.summary()


@pytest.mark.parametrize("change, problem", [
    (lambda s: s.update(rank=3), "rank 3 is not below world_size 1"),
    (lambda s: s.update(world_size="2"), "world_size must be an integer >= 1"),
    (lambda s: s.update(recorded_ranks=[1]), "must hold rank 0"),
    (lambda s: s.update(meshes=[{"shape": [2], "ranks": [0], "dim_names": None}]), "must fill the shape"),
    (lambda s: s.update(tensors={"TinyDecoder.norm": {"out": {"mesh": 0, "placements": ["Shard(0)"],
                                                              "coord": [0], "global_shape": [2]}}}),
     "mesh 0 is not in 'meshes'"),
])
def test_a_malformed_distributed_section_is_a_format_error_naming_the_sidecar(tmp_path, change, problem):
    _record(tmp_path, ranks="all")
    path = tmp_path / "rank_0" / SIDECAR
    document = json.loads(path.read_text())
    change(document["sections"]["distributed"])
    path.write_text(json.dumps(document))
    with pytest.raises(TraceFormatError, match=problem) as info:
        nbtrace.load_trace(tmp_path)
    assert str(path) in str(info.value)


def test_rank_folders_that_do_not_belong_together_are_refused(tmp_path):
    _record(tmp_path / "run", ranks="all")
    shutil.copytree(tmp_path / "run" / "rank_0", tmp_path / "run" / "rank_1")
    with pytest.raises(TraceFormatError, match=r"rank_1: holds the trace of rank 0, not of rank 1"):
        nbtrace.load_trace(tmp_path / "run")
    shutil.rmtree(tmp_path / "run" / "rank_1")
    _record(tmp_path / "run")  # a rank-0 trace written beside the rank folders
    with pytest.raises(TraceFormatError, match="holds a trace and rank_<r> folders; pass rank=r"):
        nbtrace.load_trace(tmp_path / "run")
    assert nbtrace.load_trace(tmp_path / "run", rank=0).sidecar["distributed"]["rank"] == 0
    with pytest.raises(TraceFormatError, match="holds no rank_<r> folders"):
        nbtrace.load_trace(tmp_path / "run" / "rank_0", rank=0)


G = torch.randn(6, 10, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("pieces, rule, note", [
    ([G, G], "Replicate()", ""),
    ([G * 0.25, G * 0.75], "Partial(sum)", ""),
    (list(G.chunk(2, dim=1)), "Shard(1)", ""),
    ([G[:4], G[4:]], "Shard(0)", ""),  # uneven
    ([G, G * 2], "Replicate()", "some ranks' copies differ"),
    ([G * 2, G * 2], "Replicate()", "every rank holds the same copy, and it differs"),
    ([G * 0.25, G * 0.8], "Partial(sum)", "neither rule fits; Partial(sum) comes closer"),
    ([G[:, :3], G[:, :3]], None, "do not tile the reference's [6, 10]"),
])
def test_plain_pieces_are_put_together_by_the_rule_their_shapes_and_values_show(pieces, rule, note):
    found = infer(pieces, G, tol=1e-5)
    assert (found.rule, found.note.endswith(note) if note else found.note == "") == (rule, True)
    if rule in ("Shard(0)", "Shard(1)"):
        assert torch.equal(found.tensor, G)
