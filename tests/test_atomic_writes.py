"""A process killed while it writes trace files never leaves a truncated JSON behind."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time

import pytest

WRITER = """
import sys, torch, nbtrace
from nbtrace.demo import build_demo
model, inputs = build_demo(num_layers=8, seq_len=64)
with nbtrace.trace(model, debug_path=sys.argv[1], do_prune_layers=False) as rec:
    print("ready", flush=True)
    while True:
        model(**inputs)
"""


@pytest.mark.timeout(300)
def test_killing_the_writer_at_random_moments_leaves_only_whole_files(tmp_path):
    rng = random.Random(0)
    checked = 0
    for attempt in range(6):
        folder = tmp_path / f"run{attempt}"
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(folder)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "ready"
            deadline = time.time() + 60
            while not (folder / "DemoLM_debug_tree_SUMMARY.json").exists() and time.time() < deadline:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.5))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        for name in ("DemoLM_debug_tree_FULL_TENSORS.json", "DemoLM_debug_tree_SUMMARY.json",
                     "DemoLM_debug_tree_NBTRACE.json"):
            for path in folder.rglob(name):
                json.loads(path.read_text())  # whole, or it would not parse
                checked += 1
        leftovers = [
            p.name
            for p in folder.rglob("*.json")
            if not p.name.endswith(("_FULL_TENSORS.json", "_SUMMARY.json", "_NBTRACE.json"))
        ]
        assert leftovers == []
    assert checked >= 12
    # the next trace into a folder clears temporary files its dead writers left behind
    import nbtrace
    from nbtrace.demo import build_demo

    stale = tmp_path / "run0" / ".DemoLM_debug_tree_FULL_TENSORS.json.999999999.tmp"
    stale.write_text('{"trunc')
    model, inputs = build_demo(num_layers=1)
    with nbtrace.trace(model, debug_path=tmp_path / "run0"):
        model(**inputs)
    assert list((tmp_path / "run0").glob(".*.tmp")) == []
