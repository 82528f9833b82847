"""benchmarks/gpu/bench_gpu.py runs: without a GPU it says so and exits 0; on a CPU, ``--small`` prints the table.
benchmarks/gpu/run_all.sh (a GPU session's one call) without a GPU says so, exits 0 and writes nothing."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "bench_gpu.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_without_a_gpu_it_says_so_and_exits_0(capsys, monkeypatch):
    bench = _bench()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.main([]) == 0
    assert capsys.readouterr().out.strip() == bench.NEEDS_GPU


def test_a_small_run_on_the_cpu_prints_the_table(capsys):
    bench = _bench()
    assert bench.main(["--device", "cpu", "--small", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "| model, tokens | plain | repr pruned | repr unpruned | safetensors pruned | safetensors unpruned" in out
    assert "| 2 layers x 64, 16 tokens |" in out
    for line in ("save_file alone", "aten operations per recorded tensor", "launches one reduction", "syncs per forward",
                 "peak memory"):
        assert line in out, line


def test_run_all_without_a_gpu_says_so_and_writes_nothing(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path / "out"), "CUDA_VISIBLE_DEVICES": ""}
    bin_dir = Path(sys.executable).parent  # its python3 is this interpreter's (a venv's, in CI)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(["bash", str(SCRIPT.with_name("run_all.sh"))], cwd=SCRIPT.parents[2], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "needs a CUDA GPU and found none" in done.stdout
    assert not (tmp_path / "out").exists()


def test_the_gpu_profile_without_a_gpu_says_so_and_exits_0(capsys, monkeypatch):
    bench = _bench()  # profile_gpu imports bench_gpu from its folder
    monkeypatch.setitem(sys.modules, "bench_gpu", bench)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts its folder on the path: undone after
    spec = importlib.util.spec_from_file_location("profile_gpu", SCRIPT.with_name("profile_gpu.py"))
    profile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(profile)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert profile.main([]) == 0
    assert capsys.readouterr().out.strip() == bench.NEEDS_GPU
