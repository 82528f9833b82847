"""One rank of the distributed test: run by test_distributed.py as two gloo processes."""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

import nbtrace
import rank_exit  # beside this script, which runs as its own process


class Scatter(nn.Module):
    def __init__(self, mesh):
        super().__init__()
        self.mesh = mesh

    def forward(self, x):
        return distribute_tensor(x, self.mesh, [Shard(0)])


class Double(nn.Module):
    def forward(self, d):
        return d * 2


class Gather(nn.Module):
    def forward(self, d):
        return d.full_tensor()


class Net(nn.Module):
    def __init__(self, mesh):
        super().__init__()
        self.scatter = Scatter(mesh)
        self.twice = Double()
        self.gather = Gather()
        self.seen_wrapped = []

    def forward(self, x):
        self.seen_wrapped.append(sorted(n for n, m in self.named_modules() if "forward" in m.__dict__))
        return self.gather(self.twice(self.scatter(x)))


def main(out_dir: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = Net(mesh)
    x = torch.arange(32, dtype=torch.float32).reshape(8, 4)
    debug = os.path.join(out_dir, f"rank{rank}")
    with nbtrace.trace(model, debug_path=debug) as rec:
        out = model(x)
    result = {
        "rank": rank,
        "out_ok": bool(torch.equal(out, x * 2)),
        "traces": len(rec.traces),
        "wrapped_during_forward": model.seen_wrapped,
        "wrapped_after": sorted(n for n, m in model.named_modules() if "forward" in m.__dict__),
        "debug_exists": os.path.exists(debug),
        "twice_in_is_dtensor": None,
    }
    if rec.trace is not None:
        node = rec.trace["Net.twice"]
        result["twice_in_shape"] = list(node.inputs["args"][0].shape)
        result["twice_out_shape"] = list(node.outputs.shape)
        result["twice_out_lines"] = node.outputs.lines
    with open(os.path.join(out_dir, f"result{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()  # both ranks done before either tears gloo down (else a rank may abort at exit)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
    rank_exit.leave()
