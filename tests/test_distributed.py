"""Under torch.distributed only rank 0 records and writes; a DTensor is recorded by its local shard."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("dist_worker.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(300)
def test_two_gloo_ranks_only_rank_zero_records(tmp_path):
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(
            os.environ,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
        )
        procs.append(subprocess.Popen([sys.executable, str(WORKER), str(tmp_path)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(logs)
    zero, one = (json.loads((tmp_path / f"result{r}.json").read_text()) for r in range(2))

    assert zero["out_ok"] and one["out_ok"]
    assert zero["traces"] == 1 and one["traces"] == 0
    # rank 0 wraps every submodule while tracing; rank 1 only gets its top-level forward wrapped
    assert zero["wrapped_during_forward"] == [["", "gather", "scatter", "twice"]]
    assert one["wrapped_during_forward"] == [[""]]
    assert zero["wrapped_after"] == [] and one["wrapped_after"] == []
    assert zero["debug_exists"] and not one["debug_exists"]
    assert (tmp_path / "rank0" / "Net_debug_tree_FULL_TENSORS.json").is_file()
    # the DTensor between modules is recorded by rank 0's local shard: 4 of the 8 rows
    assert zero["twice_in_shape"] == [4, 4] and zero["twice_out_shape"] == [4, 4]
    assert zero["twice_out_lines"][0].startswith("tensor([[0.0000e+00, 2.0000e+00")
