"""One rank of tests/test_backward_ranks.py (started by tests/dist_launch.py, as torchrun would start it).

``python tests/backward_rank_worker.py OUT``: joins the gloo group and runs a training step of the tiny decoder split
over the ranks (DTensor's and Megatron-style tensor parallelism) inside ``nbtrace.trace(..., backward=True)``, with
rank 0 recording (the default) and with every rank recording, with and without the float64 twin; writes into
``OUT/result_rank<r>.json`` whether each step finished, how far its gradients are from the same step untraced, and
its own shard's gradient norm of a few parameters (what its trace must have recorded).
"""

from __future__ import annotations

import json
import sys
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nbtrace  # noqa: E402
from tests import rank_exit  # noqa: E402
from tests.models import tp_models as tm  # noqa: E402

WATCHED = ("layers.0.mlp.up_proj.weight", "layers.1.self_attn.o_proj.weight", "norm.weight")


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def main(out: Path) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    reference, x = tm.build_reference(), tm.make_input()
    builds = {"dtensor": lambda: tm.build_dtensor_tp(reference, mesh), "megatron": lambda: tm.build_megatron_tp(reference)}
    result: dict = {"rank": rank}
    for kind, build in builds.items():
        plain = build()
        plain(x).pow(2).mean().backward()
        want = {n: _local(p.grad) for n, p in plain.named_parameters()}
        for ranks in (0, "all"):
            for rounding in (False, "auto"):
                key = f"{kind}_{ranks}_{rounding}"
                model = build()
                try:
                    with nbtrace.trace(model, out / key, backward=True, ranks=ranks, measure_rounding=rounding):
                        model(x).pow(2).mean().backward()
                    got = {n: _local(p.grad) for n, p in model.named_parameters()}
                    off = max(float((got[n] - w).abs().max() / w.abs().max().clamp_min(1e-30)) for n, w in want.items())
                    result[key] = {"ok": True, "relative_off": off,
                                   "norms": {n: float(got[n].norm()) for n in WATCHED}}
                except Exception:  # noqa: BLE001 - the test reads what failed
                    result[key] = {"ok": False, "error": traceback.format_exc()[-2000:]}
                dist.barrier()
    (out / f"result_rank{rank}.json").write_text(json.dumps(result, indent=1))
    rank_exit.leave()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
