"""One rank of the tensor-parallel twin tests (started by tests/dist_launch.py, as torchrun would start it).

``python tests/tp_twin_worker.py OUT [VARIANT,...]``: joins the gloo group and traces the tiny decoder split over
the ranks, with nbtrace's defaults (rank 0 records printed values and the float64 twin, which every rank runs), into
``OUT/<variant>/``: clean and with one rank's piece of a weight scaled (``tests/models/tp_models.py``); without
VARIANTs, all of them, then ``measure_rounding=True`` (``OUT/measured``: the twin only, with a warning), rank 0
tracing the single-device model alone (``OUT/alone``: no twin, after a short wait) and both the split one again
(``OUT/again``: the ranks meet again).
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nbtrace
from nbtrace.capture.twin import ranks as ranks_twin
from tests.models import tp_models as tm
from tests import rank_exit  # noqa: E402

#: variant -> (split, what is damaged: (kind, parameter, factor) or None)
VARIANTS = {
    "dtensor": ("dtensor", None),
    "megatron": ("megatron", None),
    "dtensor_up": ("dtensor", ("shard", "layers.0.mlp.up_proj.weight", 1.001)),
    "megatron_up": ("megatron", ("shard", "layers.0.mlp.up_proj.weight", 1.001)),
    "dtensor_o": ("dtensor", ("shard", "layers.1.self_attn.o_proj.weight", 1.01)),
    "megatron_norm": ("megatron", ("replica", "layers.1.post_attention_layernorm.weight", 1.001)),
    "megatron_down": ("megatron", ("shard", "layers.0.mlp.down_proj.weight", 1 + 1e-6)),  # below printed digits
}


def main(out: Path, names: list[str] | None = None) -> None:
    """Trace the ``names`` variants (all, then the lone trace and the meeting again, when None)."""
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    world = dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    reference, x = tm.build_reference(), tm.make_input()
    seconds = {}
    for name, (split, damage) in VARIANTS.items():
        if names is not None and name not in names:
            continue
        model = tm.build_dtensor_tp(reference, mesh) if split == "dtensor" else tm.build_megatron_tp(reference)
        if damage is not None:
            kind, param, factor = damage
            (tm.damage_shard if kind == "shard" else tm.damage_replica)(model, param, world // 2, factor)
        started = time.perf_counter()
        with torch.no_grad(), nbtrace.trace(model, out / name):
            model(x)
        seconds[name] = round(time.perf_counter() - started, 3)
    if names is None:
        seconds["cost"] = _streamed_cost(reference, mesh)
        for split in ("dtensor", "megatron"):
            seconds[f"fails_{split}"] = _one_rank_fails(reference, x, mesh, split, out / f"fails_{split}")
    if names is None:  # measure_rounding=True re-runs calls on the recording rank alone: only the twin, said
        model = tm.build_dtensor_tp(reference, mesh)
        with warnings.catch_warnings(record=True) as caught, torch.no_grad():
            warnings.simplefilter("always")
            with nbtrace.trace(model, out / "measured", measure_rounding=True):
                model(x)
        seconds["warnings"] = [str(w.message) for w in caught if "nbtrace" in str(w.message)]
    if names is not None:
        (out / f"seconds_rank{dist.get_rank()}.json").write_text(json.dumps(seconds))
        dist.destroy_process_group()
        return
    ranks_twin.MEET_SECONDS = 1.0  # rank 0 traces a model of its own alone: no twin, and no wait for the others
    if dist.get_rank() == 0:
        started = time.perf_counter()
        with torch.no_grad(), nbtrace.trace(reference, out / "alone"):
            reference(x)
        seconds["alone"] = round(time.perf_counter() - started, 3)
    dist.barrier()
    model = tm.build_dtensor_tp(reference, mesh)  # and then meets the others again at their next block
    with torch.no_grad(), nbtrace.trace(model, out / "again"):
        model(x)
    (out / f"seconds_rank{dist.get_rank()}.json").write_text(json.dumps(seconds))
    dist.barrier()
    dist.destroy_process_group()


def _streamed_cost(reference, mesh) -> dict:
    """What ``"auto"`` counts for the DTensor split's streamed twin on this rank, beside its DTensor weights' bytes
    in float64, whole and as this rank's pieces."""
    from nbtrace.capture.twin.stream import streamed_cost
    from torch.distributed.tensor import DTensor

    model = tm.build_dtensor_tp(reference, mesh)
    sharded = [p for p in model.parameters() if isinstance(p, DTensor)]
    return {"streamed": sum(streamed_cost(model).values()), "whole": 8 * sum(p.numel() for p in sharded),
            "pieces": 8 * sum(p.to_local().numel() for p in sharded)}


class _FailsOnRank1(torch.nn.Module):
    """A module whose float64 twin raises on rank 1 alone (as a float64 kernel missing there, or its memory out)."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor, *args, **kwargs):
        if dist.get_rank() == 1 and x.dtype == torch.float64:
            raise RuntimeError("no float64 kernel here")
        return self.inner(x, *args, **kwargs)


def _one_rank_fails(reference, x, mesh, split: str, folder: Path) -> dict:
    """Trace a split whose twin fails on rank 1 mid-run, then run it untraced and trace it again: every rank goes
    on with the others (no rank left in a collective, no forward of one meeting another's twin)."""
    model = tm.build_dtensor_tp(reference, mesh) if split == "dtensor" else tm.build_megatron_tp(reference)
    model.layers[1].mlp = _FailsOnRank1(model.layers[1].mlp)
    with torch.no_grad():
        with nbtrace.trace(model, folder):
            traced = model(x)
        again = model(x)
        with nbtrace.trace(model, folder.with_name(folder.name + "_again")):
            model(x)
    return {"equal": bool(torch.equal(traced, again)), "rank": dist.get_rank()}


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(Path(sys.argv[1]), sys.argv[2].split(",") if len(sys.argv) > 2 else None)
    rank_exit.leave()
