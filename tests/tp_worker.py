"""One rank of the tensor-parallel tests (started by tests/dist_launch.py, as torchrun would start it).

``python tests/tp_worker.py OUT``: joins the gloo group, then traces every variant of the tiny decoder
into ``OUT/<variant>/`` and writes what it checked itself into ``OUT/result_rank<r>.json``.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nbtrace
from tests.models import tp_models as tm
from tests import rank_exit  # noqa: E402

SHARD_DAMAGE = "layers.0.mlp.up_proj.weight"
REPLICA_DAMAGE = "layers.0.input_layernorm.weight"


def damaged_rank(world: int) -> int:
    """The rank whose weights the damaged variants change: 1 of 2, 2 of 4."""
    return world // 2


def main(out: Path) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    reference, x = tm.build_reference(), tm.make_input()
    with torch.no_grad():
        want = reference(x)
    bad = damaged_rank(world)
    result: dict = {"rank": rank, "world_size": world, "output_diff": {}, "seconds": {}}

    def run(name: str, model: torch.nn.Module, **trace_kwargs) -> None:
        started = time.perf_counter()
        with torch.no_grad():
            plain = model(x)
            with nbtrace.trace(model, out / name, use_repr=False, **trace_kwargs):
                traced = model(x)
        result["output_diff"][name] = float((plain - want).abs().max())
        result[f"{name}_traced_is_plain"] = bool(torch.equal(plain, traced))
        result["seconds"][name] = round(time.perf_counter() - started, 3)

    run("dtensor", tm.build_dtensor_tp(reference, mesh), ranks="all")
    run("megatron", tm.build_megatron_tp(reference), ranks="all")
    for kind, build in (("dtensor", lambda: tm.build_dtensor_tp(reference, mesh)),
                        ("megatron", lambda: tm.build_megatron_tp(reference))):
        model = build()
        tm.damage_shard(model, SHARD_DAMAGE, bad)
        run(f"{kind}_shard", model, ranks="all")
    model = tm.build_megatron_tp(reference)
    tm.damage_replica(model, REPLICA_DAMAGE, bad)
    run("megatron_replica", model, ranks="all")
    run("subset", tm.build_dtensor_tp(reference, mesh), ranks=[0, bad])
    run("default", tm.build_dtensor_tp(reference, mesh))
    model = tm.build_dtensor_tp(reference, mesh)
    with torch.no_grad(), nbtrace.model_addition_debugger_context(model, out / "dropin", use_repr=False):
        model(x)
    pair = tm.split_pair(tm.Pair(), mesh)
    with torch.no_grad(), nbtrace.trace(pair, out / "async", use_repr=False, ranks="all"):
        pair(x[0, :, :8])
    if world == 4:
        probe = tm.LayoutProbe(init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp")), mesh)
        with torch.no_grad(), nbtrace.trace(probe, out / "probe", use_repr=False, ranks="all"):
            probe(tm.probe_input())
    try:
        nbtrace.trace(reference, out / "never", ranks=[0, world]).__enter__()
    except ValueError as exc:
        result["bad_ranks_error"] = str(exc)
    (out / f"result_rank{rank}.json").write_text(json.dumps(result, indent=1))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(Path(sys.argv[1]))
    rank_exit.leave()
