#!/usr/bin/env bash
# Everything a session lent a GPU runs, in one call (about 9 minutes on an H100), each step's output in
# "$OUT" (the device tool's folder; ./gpu-results elsewhere), the short results at the end of stdout:
#
#   bash benchmarks/gpu/run_all.sh            # from the repository root
#
# 1. the fused reductions' bits on CUDA (does std_mean give mean()'s bits there? docs/performance.md)
# 2. tests/test_on_cuda.py (the port on the GPU against GPU and CPU traces, narrow, real sdpa, TF32)
# 3. issue 19's table (benchmarks/gpu/bench_gpu.py), with the host's launch cost and the floor it sets
# 4. the invariant suite on CUDA for what has not been run there yet (fp32 and TF32; bf16 and fp16 are in
#    benchmarks/precision_results.md), cut off by `timeout` so the call ends in time
set -u
OUT="${OUT:-gpu-results}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! python3 -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
    echo "run_all.sh needs a CUDA GPU and found none: nothing run"
    exit 0
fi
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/card.txt"
timeout 60 python3 benchmarks/bits_fused_stats.py --device cuda > "$OUT/bits.txt" 2>&1
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_on_cuda.py > "$OUT/cuda_tests.txt" 2>&1
timeout 240 python3 benchmarks/gpu/bench_gpu.py > "$OUT/bench_gpu.txt" 2>&1
timeout 270 python3 benchmarks/gpu/bench_precision_gpu.py --dtypes fp32,tf32 --widths 256 > "$OUT/precision.txt" 2>&1
echo "== bits";      tail -8 "$OUT/bits.txt"
echo "== tests";     tail -2 "$OUT/cuda_tests.txt"
echo "== bench";     grep -v '^\[transformers\]' "$OUT/bench_gpu.txt" | tail -14
echo "== precision"; grep -c '^| fp32\|^| tf32' "$OUT/precision.txt"; tail -1 "$OUT/precision.txt"
