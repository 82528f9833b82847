"""Tensor-parallel runs on 2 and 4 real gloo processes, traced with ``ranks="all"`` and compared whole.

A tiny decoder is split with ``parallelize_module`` (ColwiseParallel/RowwiseParallel: DTensors) and by
hand (plain slices and an explicit all_reduce); both must agree with the single-process run with every
sharded tensor reassembled and compared, and a shard damaged on one rank must be named with its module
and rank. The runs are launched once per session (tests/tp_runs.py).
"""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest
import torch

import nbtrace
from nbtrace import TraceFormatError
from nbtrace.cli import main as cli
from nbtrace.diff.ranks.ranked import ShardedDiff
from tests.tp_runs import single_traces, tp_run

pytestmark = pytest.mark.timeout(900)
WORLDS = (2, 4)
TENSORS = 57  # recorded tensors in it


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return single_traces(tmp_path_factory)


@pytest.fixture(scope="module", params=WORLDS, ids=lambda w: f"{w}ranks")
def run(request, tmp_path_factory):
    return tp_run(request.param, tmp_path_factory)


def diffs(comparison):
    return [d for m in comparison.matches for d in m.diffs]


def test_the_split_models_compute_what_the_single_process_computes(run):
    for result in run.results:
        assert result["output_diff"]["dtensor"] < 1e-5 and result["output_diff"]["megatron"] < 1e-5
        assert result["output_diff"]["dtensor_shard"] > 0.1  # the damage is real
        assert all(result[f"{v}_traced_is_plain"] for v in result["output_diff"])  # tracing changes nothing


@pytest.mark.parametrize("kind", ["dtensor", "megatron"])
def test_a_clean_run_agrees_with_every_sharded_tensor_reassembled_and_compared(run, single, kind):
    comparison = nbtrace.compare(single["decoder"], run[kind])
    assert comparison.agree, comparison.summary()
    assert len(comparison.b.ranks) == run.world and not comparison.unmatched_a and not comparison.unmatched_b
    found = diffs(comparison)
    assert len(found) == TENSORS and all(isinstance(d, ShardedDiff) and d.basis == "tensors" for d in found)
    sharded = [d for d in found if any(shape != d.shape for shape in d.local_shapes.values())]
    assert len(sharded) >= 26 and all(d.ok and d.b_shape == d.shape for d in sharded)
    assert max(d.max_abs for d in found) < 1e-5
    rules = Counter((d.rule, d.inferred) for d in found)
    if kind == "dtensor":  # placements from the DTensors; the rest inferred from shapes and values
        assert rules[("Shard(2)", False)] == 14 and rules[("Partial(sum)", False)] == 4
        assert rules[("Replicate()", False)] == 10 and rules[("Shard(1)", True)] == 8
    else:  # plain tensors only: every rule inferred, the row-parallel outputs as partial sums
        assert rules == Counter({("Replicate()", True): 27, ("Shard(2)", True): 18, ("Shard(1)", True): 8,
                                 ("Partial(sum)", True): 4})
    assert f"b: {run.world} ranks of {run.world} reassembled" in comparison.summary()


@pytest.mark.parametrize("kind", ["dtensor", "megatron"])
def test_a_shard_damaged_on_one_rank_is_named_with_module_and_rank(run, single, kind):
    comparison = nbtrace.compare(single["decoder"], run[f"{kind}_shard"])
    first = comparison.first_divergence
    assert first is not None and first.module_path == "TinyDecoder.layers.0.mlp.up_proj"
    assert (first.io, first.rule, list(first.wrong_ranks)) == ("output", "Shard(2)", [run.damaged])
    assert first.max_abs > 1.0
    how = "inferred" if kind == "megatron" else "DTensor"
    assert f"only rank {run.damaged}'s shard differs" in str(first) and f"Shard(2) ({how})" in str(first)
    # the same run as the reference side: the same module and rank
    reverse = nbtrace.compare(run[f"{kind}_shard"], single["decoder"]).first_divergence
    assert reverse.module_path == first.module_path and list(reverse.wrong_ranks) == [run.damaged]


def test_a_replica_damaged_on_one_rank_is_named(run, single):
    first = nbtrace.compare(single["decoder"], run["megatron_replica"]).first_divergence
    assert first.module_path == "TinyDecoder.layers.0.input_layernorm"
    assert (first.rule, list(first.wrong_ranks)) == ("Replicate()", [run.damaged])
    assert f"only rank {run.damaged}'s copy differs" in str(first)


def test_the_default_still_writes_rank_zero_only(run):
    default = run["default"]
    assert sorted(p.name for p in default.iterdir() if not p.name.endswith(".safetensors")) == [
        "TinyDecoder_debug_tree_FULL_TENSORS.json", "TinyDecoder_debug_tree_NBTRACE.json",
        "TinyDecoder_debug_tree_SUMMARY.json"]
    trace = nbtrace.load_trace(default)
    assert trace.ranks == {}
    section = trace.sidecar["distributed"]
    assert (section["rank"], section["world_size"], section["recorded_ranks"]) == (0, run.world, [0])
    q_proj = section["tensors"]["TinyDecoder.layers.0.self_attn.q_proj"]["out"]
    assert q_proj["placements"] == ["Shard(2)"] and q_proj["global_shape"] == [2, 16, 64]
    assert trace["TinyDecoder.layers.0.self_attn.q_proj"].outputs.shape == (2, 16, 64 // run.world)  # local shard
    for name in ("FULL_TENSORS", "SUMMARY"):  # the drop-in writes the same bytes, on rank 0 only
        file = f"TinyDecoder_debug_tree_{name}.json"
        assert (run["dropin"] / file).read_bytes() == (default / file).read_bytes()
    assert not list(run["dropin"].glob("rank_*"))
    hint = nbtrace.compare(run["dtensor"], default).summary()
    assert f"b is rank 0's trace of a {run.world}-rank run" in hint


def test_a_subset_of_ranks_gives_no_wrong_verdict(run, single):
    folders = sorted(p.name for p in run["subset"].iterdir())
    assert folders == sorted({"rank_0", f"rank_{run.damaged}"})
    comparison = nbtrace.compare(single["decoder"], run["subset"])
    assert comparison.first_divergence is None
    if run.world == 4:  # plain tensors need every rank; DTensor pieces are checked where they are
        skipped = [d for d in diffs(comparison) if d.ok is None]
        assert len(skipped) == 33 and all("were not recorded" in d.problem for d in skipped)
        assert comparison.compared == 24 and "33 not reassembled" in comparison.summary()


def test_an_async_collective_output_is_recorded_as_the_tensor_it_waits_for(run, single):
    want = nbtrace.load_trace(single["pair"])["Pair.keep"].inputs["args"][0].load()
    traces = nbtrace.load_trace(run["async"]).ranks
    for trace in traces.values():
        got = trace["Pair.keep"].inputs["args"][0]
        assert got.ref == "./Pair.keep_inputs_args_0.safetensors"
        assert torch.allclose(got.load(), want, atol=1e-5)
    assert nbtrace.compare(single["pair"], run["async"]).agree


def test_two_d_meshes_sub_meshes_and_uneven_shards_reassemble(tmp_path_factory, single):
    run = tp_run(4, tmp_path_factory)
    comparison = nbtrace.compare(single["probe"], run["probe"])
    assert comparison.agree and comparison.compared == 15
    rules = {d.rule for d in diffs(comparison) if not d.inferred}
    assert rules == {"Shard(0),Shard(1)", "Shard(0),Shard(0)", "Replicate(),Shard(1)", "Shard(1),Partial(sum)",
                     "Partial(sum),Replicate()", "Shard(1)", "Shard(0)"}
    uneven = comparison.match_of(comparison.a["LayoutProbe.probes.uneven_s0"]).diffs[0]
    assert uneven.local_shapes == {0: (2, 10), 1: (2, 10), 2: (2, 10), 3: (0, 10)}


def test_load_trace_reads_one_rank_or_all(run):
    folder = run["dtensor"]
    joined = nbtrace.load_trace(folder)
    assert sorted(joined.ranks) == list(range(run.world)) and joined is joined.ranks[0]
    one = nbtrace.load_trace(folder, rank=1)
    assert one.ranks == {} and one.sidecar["distributed"]["rank"] == 1
    assert one["TinyDecoder.layers.0.mlp.up_proj"].outputs.shape == (2, 16, 128 // run.world)
    assert nbtrace.load_trace(joined, rank=1) is joined.ranks[1]
    with pytest.raises(TraceFormatError, match=rf"rank_{run.world}: no such rank folder"):
        nbtrace.load_trace(folder, rank=run.world)


def _copy(run, variant, tmp_path):
    return shutil.copytree(run[variant], tmp_path / variant)


def _edit_rank_tree(folder, rank, change):
    for name in ("FULL_TENSORS", "SUMMARY"):
        file = folder / f"rank_{rank}" / f"TinyDecoder_debug_tree_{name}.json"
        tree = json.loads(file.read_text())
        change(tree)
        file.write_text(json.dumps(tree, indent=2))


def test_ranks_that_disagree_on_the_call_tree_are_refused(run, tmp_path):
    folder = _copy(run, "megatron", tmp_path)
    _edit_rank_tree(folder, 1, lambda tree: tree["children"].pop())  # rank 1 "never called" the final norm
    with pytest.raises(TraceFormatError, match=r"rank_1: recorded 29 calls, rank_0 30: their call trees differ"):
        nbtrace.load_trace(folder)
    folder = _copy(run, "dtensor", tmp_path)
    _edit_rank_tree(folder, 1, lambda tree: tree["children"][0].update(module_path="TinyDecoder.layers.9"))
    with pytest.raises(TraceFormatError, match=r"rank_1: its call tree differs from rank_0's at call 1: "
                                               r"'TinyDecoder.layers.9' \(depth 1\) where rank 0 has"):
        nbtrace.compare(folder / "rank_0", folder)


def test_a_missing_rank_folder_is_refused(run, tmp_path, single, capsys):
    folder = _copy(run, "dtensor", tmp_path)
    last = folder / f"rank_{run.world - 1}"
    shutil.rmtree(last)
    with pytest.raises(TraceFormatError, match=rf"{last}: is missing: the run recorded ranks 0, 1"):
        nbtrace.load_trace(folder)
    assert cli(["diff", str(single["decoder"]), str(folder)]) == 2
    assert f"rank_{run.world - 1}: is missing" in capsys.readouterr().err


def test_mixed_world_sizes_are_refused(tmp_path_factory, tmp_path):
    two, four = tp_run(2, tmp_path_factory), tp_run(4, tmp_path_factory)
    folder = _copy(two, "dtensor", tmp_path)
    shutil.rmtree(folder / "rank_1")
    shutil.copytree(four["dtensor"] / "rank_1", folder / "rank_1")
    with pytest.raises(TraceFormatError, match=r"rank_1: was recorded with world size 4, rank_0 with 2: mixed runs"):
        nbtrace.load_trace(folder)


def test_the_cli_the_table_the_html_and_the_widget_name_the_rank(tmp_path_factory, single, capsys):
    run = tp_run(2, tmp_path_factory)
    assert cli(["diff", str(single["decoder"]), str(run["dtensor_shard"])]) == 1
    out = capsys.readouterr().out
    assert "only rank 1's shard differs (max_abs 1.85); reassembled by Shard(2) (DTensor)" in out
    assert "out Shard(2) (DTensor) r1" in out  # the table's row of up_proj
    comparison = nbtrace.compare(single["decoder"], run["dtensor_shard"])
    frame = comparison.to_dataframe()
    row = frame[(frame.module_path == "TinyDecoder.layers.0.mlp.up_proj") & (frame.io == "output")].iloc[0]
    assert (row.rule, row.wrong_ranks, bool(row.ok)) == ("Shard(2) (DTensor)", (1,), False)
    assert "only rank 1&#x27;s shard differs" in comparison._repr_html_()
    view = nbtrace.TraceView(comparison)
    detail = view.detail(view.selected_row)
    assert detail["path"] == "TinyDecoder.layers.0.mlp.up_proj"
    assert "output out: Shard(2) (DTensor); only rank 1's shard differs" in detail["comparison"]["reassembled"]


def test_two_tensor_parallel_runs_are_compared_rank_by_rank(tmp_path_factory, capsys):
    run = tp_run(2, tmp_path_factory)
    with pytest.raises(ValueError, match="compare them rank by rank"):
        nbtrace.compare(run["dtensor"], run["megatron"])
    assert nbtrace.compare(nbtrace.load_trace(run["dtensor"], rank=1), nbtrace.load_trace(run["dtensor"], rank=1)).agree
    # the command line: a clear error with the way out, then one rank of each (rank 1's shard was damaged)
    clean, damaged = str(run["dtensor"]), str(run["dtensor_shard"])
    assert cli(["diff", clean, damaged]) == 2
    assert "nbtrace diff A B --rank R compares one rank of each" in capsys.readouterr().err
    assert cli(["diff", clean, clean, "--rank", "0"]) == 0
    assert cli(["diff", clean, damaged, "--rank", "1"]) == 1
    assert "first divergence: TinyDecoder.layers.0.mlp.up_proj\n" in capsys.readouterr().out
    assert cli(["diff", clean, damaged, "--rank", "2"]) == 2
    assert "no such rank folder" in capsys.readouterr().err


def test_a_rank_given_a_bad_ranks_argument_says_why(run):
    messages = {result["bad_ranks_error"] for result in run.results}
    assert messages == {f"ranks=[0, {run.world}]: {run.world} is not a rank of this run; this process is "
                        f"rank {r} of {run.world}" for r in range(run.world)}
    assert not (run.root / "never").exists()
