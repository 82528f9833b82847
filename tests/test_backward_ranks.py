"""backward=True under two gloo ranks (tests/backward_rank_worker.py): a tensor-parallel training step, DTensor's and
Megatron-style, recorded by rank 0 or by every rank, with and without the float64 twin. Before, a rank that did not
record ran its forward under no_grad, so its ``loss.backward()`` raised while rank 0 waited in a collective."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbtrace.core.load import load_trace
from nbtrace.render.gradient_layers import norm_of
from tests.dist_launch import launch

WORKER = Path(__file__).with_name("backward_rank_worker.py")
ROOT = "TinyDecoder"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("backward_ranks")
    launch(WORKER, [str(out)], 2, out / "logs", timeout=300)
    return out, [json.loads((out / f"result_rank{r}.json").read_text()) for r in (0, 1)]


def test_every_rank_finishes_its_step_with_the_gradients_of_an_untraced_step(run):
    _, results = run
    for result in results:
        for key, step in result.items():
            if key == "rank":
                continue
            assert step["ok"], f"rank {result['rank']}, {key}:\n{step.get('error')}"
            # the same up to the order autograd sums a tensor's contributions in (docs/backward.md)
            assert step["relative_off"] < 1e-5, (result["rank"], key, step["relative_off"])


@pytest.mark.parametrize("kind", ["dtensor", "megatron"])
def test_each_recording_rank_holds_its_own_shard_s_gradients(run, kind):
    out, results = run
    for ranks, rounding in ((0, False), ("all", False), (0, "auto"), ("all", "auto")):
        folder = out / f"{kind}_{ranks}_{rounding}"
        for rank in ((0,) if ranks == 0 else (0, 1)):
            trace = load_trace(folder if ranks == 0 else folder / f"rank_{rank}")
            backward = trace.backward
            assert backward is not None and len(backward) == 1, (folder, rank)
            for name, want in results[rank][f"{kind}_{ranks}_{rounding}"]["norms"].items():
                assert norm_of(backward.parameters[f"{ROOT}.{name}"]) == pytest.approx(want, rel=1e-3), (folder, name)
            if rounding == "auto":  # the forward's twin ran with every rank; its backward cannot run on one alone
                assert backward.twin is None and "several ranks" in backward.twin_skipped
