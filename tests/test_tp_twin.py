"""The float64 twin of a tensor-parallel run: 2 real gloo processes run their twins together, and a port split
over them is decided by twins against the single-device original, from two default folders.

The tiny decoder of ``tests/models/tp_models.py`` is split with ``parallelize_module`` (DTensors) and by hand
(plain slices and an explicit all_reduce) and traced with nbtrace's defaults (rank 0 records printed values; every
rank runs its part of the twin): the correct splits agree, and one rank's piece of a weight scaled by 1.001 or
1.01 (a shard of a column- or row-parallel projection, or one rank's copy of a norm's weight), or by 1 + 1e-6 (a
row-parallel shard: below the printed digits), is named at its module, whichever side is the reference; on 2 and
4 ranks. The piece fingerprints (``capture/twin/placed.py``) add up to the whole's; ``measure_rounding=True``
records the twin only, and a rank that traces alone waits for no one.
"""

from __future__ import annotations

import json

import pytest
import torch

import nbtrace
from nbtrace.capture.twin.fingerprint import fingerprint
from nbtrace.capture.twin.placed import placed_fingerprint
from nbtrace.capture.twin.signs import WIDTH
from tests.dist_launch import launch
from tests.models import tp_models as tm
from tests.tp_twin_worker import VARIANTS

pytestmark = pytest.mark.timeout(300)
WORKER = __import__("pathlib").Path(__file__).with_name("tp_twin_worker.py")
NAMED = {"dtensor_up": "TinyDecoder.layers.0.mlp.up_proj", "megatron_up": "TinyDecoder.layers.0.mlp.up_proj",
         "dtensor_o": "TinyDecoder.layers.1.self_attn.o_proj",
         "megatron_norm": "TinyDecoder.layers.1.post_attention_layernorm",
         "megatron_down": "TinyDecoder.layers.0.mlp.down_proj"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("tp_twin")
    launch(WORKER, [str(root)], 2, root / "logs", timeout=240)
    with torch.no_grad(), nbtrace.trace(model := tm.build_reference(), root / "single"):
        model(tm.make_input())
    return root


@pytest.mark.parametrize("split", ["dtensor", "megatron"])
def test_a_correct_split_gets_its_twin_and_agrees_with_the_single_device_original(folders, split):
    trace = nbtrace.load_trace(folders / split)
    section = trace.sidecar["twin"]
    assert "skipped" not in section and section["ranks"]["world_size"] == 2
    assert trace.sidecar["distributed"]["recorded_ranks"] == [0]  # the default: rank 0 records, both run the twin
    for a, b in ((folders / "single", folders / split), (folders / split, folders / "single")):
        comparison = nbtrace.compare(a, b)
        assert comparison.method == "twin" and comparison.agree, comparison.summary()
        assert comparison.twin.compared >= 60
        assert max(p.score for e in comparison.twin.events for p in e.decided) < 0.5  # measured: 0.08 of the allowance
    assert "float64 twin ran on its 2 ranks together" in nbtrace.compare(folders / "single", folders / split).summary()


def test_measure_rounding_true_records_the_twin_only_and_says_so(folders):
    for rank in (0, 1):
        said = json.loads((folders / f"seconds_rank{rank}.json").read_text())["warnings"]
        assert len(said) == 1 and "under several ranks only the float64 twin is recorded" in said[0]
    trace = nbtrace.load_trace(folders / "measured")
    assert "rounding" not in trace.sidecar and "skipped" not in trace.sidecar["twin"]
    assert nbtrace.compare(folders / "single", folders / "measured").agree


def test_a_sharded_output_is_fingerprinted_whole(folders):
    single = nbtrace.load_trace(folders / "single").twin
    for split in ("dtensor", "megatron"):
        twin = nbtrace.load_trace(folders / split).twin
        up = twin.calls["TinyDecoder.layers.0.mlp.up_proj"]
        whole = up["out"] if split == "dtensor" else up["out|Shard(2)"]  # a DTensor's placements, or a reading
        assert whole.shape == (2, 16, tm.INTERMEDIATE) == single.calls["TinyDecoder.layers.0.mlp.up_proj"]["out"].shape
        assert whole.distance(single.calls["TinyDecoder.layers.0.mlp.up_proj"]["out"]) < 1e-13


@pytest.mark.parametrize("variant", sorted(NAMED))
def test_a_bad_piece_on_one_rank_is_named_at_its_module_from_two_default_folders(folders, variant):
    for a, b in ((folders / "single", folders / variant), (folders / variant, folders / "single")):
        comparison = nbtrace.compare(a, b)
        first = comparison.first_divergence
        assert comparison.method == "twin" and first is not None, comparison.summary()
        assert first.module_path == NAMED[variant], comparison.summary()
    if variant == "megatron_norm":  # the pieces read as copies: the broken one is named
        assert "read as copies of one tensor (Replicate(), no layout recorded): only rank 1's copy" in first.reason
    if variant == "megatron_up":  # as pieces side by side: the twins cannot say whose
        assert "its pieces read as Shard(2) (no layout recorded): the twins cannot say whose piece" in first.reason


def test_on_four_ranks_too(folders, tmp_path_factory):
    root = tmp_path_factory.mktemp("tp_twin4")
    chosen = ["dtensor", "megatron_up", "megatron_norm"]  # the hand split: its readings of 4 pieces
    launch(WORKER, [str(root), ",".join(chosen)], 4, root / "logs", timeout=240)
    assert nbtrace.load_trace(root / "megatron_up").sidecar["twin"]["ranks"] == {"world_size": 4, "rank": 0, "read": 34}
    for variant in chosen:
        comparison = nbtrace.compare(folders / "single", root / variant)
        first = comparison.first_divergence
        assert comparison.method == "twin" and comparison.twin.compared >= 60, comparison.summary()
        assert (first.module_path if first else None) == NAMED.get(variant), comparison.summary()


def test_every_rank_ran_every_variant_and_a_rank_tracing_alone_waits_for_no_one(folders):
    seconds = [json.loads((folders / f"seconds_rank{rank}.json").read_text()) for rank in (0, 1)]
    failed = {"fails_dtensor", "fails_megatron", "cost"}  # the blocks whose twin fails on rank 1, the cost (below)
    assert set(seconds[0]) == set(VARIANTS) | {"alone", "warnings"} | failed
    assert set(seconds[1]) == set(VARIANTS) | {"warnings"} | failed
    assert 1.0 <= seconds[0]["alone"] < 30  # it waited for the others as long as it was told, then went on alone
    alone = nbtrace.load_trace(folders / "alone").sidecar["twin"]
    assert alone["calls"] == {} and "not every rank started nbtrace.trace within 1 s" in alone["skipped"]
    again = nbtrace.load_trace(folders / "again")  # the ranks' next block: together again
    assert "skipped" not in again.sidecar["twin"] and nbtrace.compare(folders / "single", again).agree


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_pieces_fingerprints_add_up_to_the_whole(seed):
    generator = torch.Generator().manual_seed(seed)
    shape = [(2, 16, 128), (3, 5000, 7), (9001,)][seed]
    x = torch.randn(shape, generator=generator, dtype=torch.float64)
    valid = torch.rand(shape[:2], generator=generator) > 0.3 if len(shape) == 3 else None
    for dim in range(len(shape)):
        for parts in (2, 3):
            total, offset = 0, 0
            for piece in x.chunk(parts, dim):  # uneven pieces too
                start = [0] * len(shape)
                start[dim] = offset
                total = total + placed_fingerprint(piece, shape, start, valid, layout=True)
                offset += piece.shape[dim]
            whole = fingerprint(x, valid)  # the 16 sums, the counts, the layout sums of three or more axes
            assert total.shape == whole.shape == (WIDTH + (8 if len(shape) == 3 else 0),)
            assert torch.allclose(total[16:WIDTH], whole[16:WIDTH], rtol=1e-14)
            for sums in (slice(0, 16), slice(WIDTH, None)) if len(shape) == 3 else (slice(0, 16),):
                assert float((total[sums] - whole[sums]).abs().max()) <= 1e-14 * float(whole[17].sqrt())


@pytest.mark.parametrize("split", ["dtensor", "megatron"])
def test_a_twin_that_fails_on_one_rank_stops_on_every_rank_and_the_run_goes_on(folders, split):
    """Rank 1's twin raises mid-run: rank 0 stops at its next collective instead of waiting in it, both say which
    rank failed and why, the next forwards of both ranks meet each other (not the other's twin), and the next
    block's twins run together again (each fails the same way: the module still raises in float64)."""
    for rank in (0, 1):
        found = json.loads((folders / f"seconds_rank{rank}.json").read_text())[f"fails_{split}"]
        assert found == {"equal": True, "rank": rank}
    for folder in (folders / f"fails_{split}", folders / f"fails_{split}_again"):
        trace = nbtrace.load_trace(folder)
        said = trace.sidecar["twin"]["skipped"]
        assert said.startswith("the float64 twin failed on rank 1: RuntimeError: no float64 kernel here"), said
        assert trace.twin is None or not trace.twin.calls


def test_auto_counts_a_dtensor_weight_by_the_piece_each_rank_holds(folders):
    """The streamed twin's cost ``"auto"`` decides by counts each DTensor weight as this rank's float64 copy holds it:
    its piece (half of it on 2 ranks), not the whole, which left the twin out of a tensor-parallel model that fits."""
    for rank in (0, 1):
        cost = json.loads((folders / f"seconds_rank{rank}.json").read_text())["cost"]
        assert cost["pieces"] * 2 == cost["whole"] > 0
        assert cost["pieces"] <= cost["streamed"] < cost["whole"], cost
