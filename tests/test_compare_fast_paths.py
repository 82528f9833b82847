"""compare's fast paths give the numbers of the plain torch paths they replace.

``compare`` reads each tensor file once, decodes it with numpy and measures a pair from one
set of sums (``full_pairs.FullPairs``), reusing the numbers of a pair of contents measured
before. These tests hold those numbers to the torch computations (``metrics.measure_with_torch`` and
``noise.PairStats.record``) on real traces — several seeds, dtypes, a padded batch, NaN and
inf — and check that each file is read once and that the standard library's JSON reading
is kept for what orjson refuses.
"""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import save

import nbtrace
from nbtrace.core.json_text import parse_json
from nbtrace.core.tensor_file import float64_values
from nbtrace.demo import build_demo
from nbtrace.diff.measure.full_pairs import FullPairs
from nbtrace.diff.measure.metrics import TensorDiff, measure_with_torch
from nbtrace.diff.measure.noise import PairStats
from nbtrace.core.tensor import TensorValue
from nbtrace.errors import TraceFormatError

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_file_values_decode_as_torch_reads_them(dtype):
    values = torch.randn(3, 5, generator=torch.Generator().manual_seed(1)) * 300
    tensor = values > 0 if dtype == torch.bool else values.to(dtype)
    if dtype.is_floating_point:
        tensor[0, 0], tensor[0, 1], tensor[0, 2] = math.nan, math.inf, -math.inf
    decoded = float64_values(save({"data": tensor}), "x.safetensors")
    expected = tensor.to(torch.float64).reshape(-1).numpy()
    assert decoded.dtype == expected.dtype and decoded.shape == expected.shape
    assert ((decoded == expected) | ((decoded != decoded) & (expected != expected))).all()


def test_dtypes_numpy_cannot_hold_go_through_torch():
    assert float64_values(save({"data": torch.zeros(4, dtype=torch.float8_e4m3fn)}), "f8") is None


@pytest.mark.parametrize("content, problem", [
    (b"\x01", "shorter than its header"),
    (b"\xff" * 8 + b"{}", "header longer than the file"),
    (b"\x02\x00\x00\x00\x00\x00\x00\x00{]", "header is not JSON"),
])
def test_a_malformed_file_names_itself(content, problem):
    with pytest.raises(TraceFormatError, match=f"broken.safetensors.*{problem}"):
        float64_values(content, "broken.safetensors")


def test_a_file_whose_offsets_leave_it_names_itself():
    good = save({"data": torch.zeros(4)})
    with pytest.raises(TraceFormatError, match="cut.safetensors: is not a readable safetensors file"):
        float64_values(good[:-4], "cut.safetensors")


def test_json_orjson_refuses_is_read_as_the_standard_library_reads_it():
    assert math.isnan(parse_json(b'{"x": NaN}')["x"])
    with pytest.raises(ValueError, match="Expecting"):  # the standard library's message, not orjson's
        parse_json(b'{"x": ')


def _traced(model, inputs, folder):
    with torch.no_grad(), nbtrace.trace(model, debug_path=folder, use_repr=False, do_prune_layers=False):
        model(**inputs)
    return folder


def _both_ways(comparison):
    """Every tensor pair measured afresh by ``FullPairs`` and by the torch paths (the comparison's own
    TensorDiffs carry the verdict's marks), with each way's DiffStats. The torch way measures every pair
    (no data flow): a tensor handed on again reads as where it first appeared, over the real tokens."""
    from nbtrace.diff.measure.noise import padding_rows

    valid = padding_rows(comparison.a, comparison.flows[0].cache)
    fast_stats, slow_stats = PairStats(valid, comparison.flows[0]), PairStats(valid, None)
    fast_pairs = FullPairs(comparison.flows[0].cache, comparison.flows[1].cache, fast_stats)
    numbers = []
    for match in comparison.matches:
        b_tensors = {(io, arg): t for io, arg, t in match.b.tensors()}
        a_tensors = {(io, arg): t for io, arg, t in match.a.tensors()}
        for d in match.diffs:
            if d.basis != "tensors":
                continue
            x, y = a_tensors[(d.io, d.arg)], b_tensors[(d.io, d.b_arg)]
            fast, slow = (TensorDiff(d.io, d.arg, d.b_arg, d.shape, d.b_shape, d.dtype, d.b_dtype, rtol=d.rtol,
                                     atol=d.atol) for _ in range(2))
            fast_pairs(match.a, fast, x, y)
            measure_with_torch(slow, x, y, lambda r, tx, ty, node=match.a: slow_stats.record(node, r, tx, ty))
            numbers.append((fast, slow))
    return numbers, fast_stats, slow_stats


def _close(x, y):
    if x is None or y is None:
        return x is y
    if isinstance(x, bool) or isinstance(y, bool):
        return x == y
    return x == y or (math.isnan(x) and math.isnan(y)) or abs(x - y) <= 1e-12 * max(abs(x), abs(y))


@pytest.mark.parametrize("seed, dtype, padded", [(0, torch.float32, False), (3, torch.bfloat16, True),
                                                 (5, torch.float16, True)])
def test_pair_numbers_equal_the_torch_paths(tmp_path, seed, dtype, padded):
    model, inputs = build_demo(num_layers=3, seq_len=12, seed=seed)
    port, _ = build_demo(num_layers=3, seq_len=12, seed=seed)
    model, port = model.to(dtype), port.to(dtype)
    with torch.no_grad():
        port.layers[1].mlp.up_proj.weight.mul_(1.01)
    if padded:
        inputs["attention_mask"][0, -3:] = 0  # right padding: left padding makes the demo NaN (rows attend nothing)
    a = _traced(model, inputs, tmp_path / "a")
    b = _traced(port, inputs, tmp_path / "b")
    comparison = nbtrace.compare(a, b)
    numbers, fast_stats, slow_stats = _both_ways(comparison)
    assert len(numbers) > 50
    for fast, slow in numbers:
        for name in ("max_abs", "max_rel", "cosine", "excess", "ok", "problem"):
            assert _close(getattr(fast, name), getattr(slow, name)), (fast.arg, name, fast, slow)
    found = fast_stats.found
    assert found.keys() == comparison._measured.found.keys() and found.keys() <= slow_stats.found.keys()
    assert len(found) > 20
    for key, fast in found.items():
        slow = slow_stats.found[key]
        assert fast.n == slow.n and fast.u == slow.u
        for name in ("rel", "rms", "norm"):
            assert _close(getattr(fast, name), getattr(slow, name)), (key, name, fast, slow)
    assert any(f.rel > 0 for f in found.values()) and any(f.rel == 0 for f in found.values())


def test_nan_and_inf_at_other_places_read_as_before(tmp_path):
    model, inputs = build_demo(num_layers=2, seq_len=8, seed=2)
    port, _ = build_demo(num_layers=2, seq_len=8, seed=2)
    with torch.no_grad():
        port.layers[1].mlp.up_proj.weight[0, 0] = math.inf  # inf, and NaN after it, where a has finite values
    a = _traced(model, inputs, tmp_path / "a")
    b = _traced(port, inputs, tmp_path / "b")
    comparison = nbtrace.compare(a, b)
    numbers, _, _ = _both_ways(comparison)
    broken = [fast for fast, _ in numbers if fast.problem]
    assert broken and all(f.problem == "NaN/inf at different places" and f.max_abs == math.inf for f in broken)
    for fast, slow in numbers:
        for name in ("max_abs", "max_rel", "cosine", "ok", "problem"):
            assert _close(getattr(fast, name), getattr(slow, name)), (fast.arg, name)
    assert comparison.first_divergence.module_path.startswith("DemoLM.layers.1.mlp")


def test_each_tensor_file_is_read_once(tmp_path, monkeypatch):
    model, inputs = build_demo(num_layers=3, seq_len=8, seed=4)
    port, _ = build_demo(num_layers=3, seq_len=8, seed=4)
    with torch.no_grad():
        port.layers[2].mlp.up_proj.weight.mul_(1.01)
    a = _traced(model, inputs, tmp_path / "a")
    b = _traced(port, inputs, tmp_path / "b")
    from nbtrace.diff.align import flow

    reads: list[int] = []
    real = flow.read_open_file
    monkeypatch.setattr(flow, "read_open_file", lambda fd, size: reads.append(fd) or real(fd, size))
    monkeypatch.setattr(TensorValue, "load", lambda *args: pytest.fail("a file was read a second time"))
    comparison = nbtrace.compare(a, b)
    files = {p.stat().st_ino for side in (a, b) for p in side.glob("*.safetensors")}
    assert 0 < len(reads) <= len(files)  # hard-linked repeats are not even read once more
    assert comparison.first_divergence.module_path == "DemoLM.layers.2.mlp.up_proj"


def _printed_by_loop(xs, ys, rtol, atol):
    """The printed-values numbers computed number by number (what metrics._printed did before numpy)."""
    scale = max((abs(x) for x, _ in xs if math.isfinite(x)), default=0.0)
    delta = excess = dot = nx = ny = 0.0
    ok = True
    for (x, ux), (y, uy) in zip(xs, ys):
        if not (math.isfinite(x) and math.isfinite(y)):
            if x == y or (math.isnan(x) and math.isnan(y)):
                continue
            return math.inf, False
        d = abs(x - y)
        delta, excess = max(delta, d), max(excess, d - max(ux, uy))
        ok = ok and d - max(ux, uy) <= rtol * scale + atol
        dot, nx, ny = dot + x * y, nx + x * x, ny + y * y
    return delta, ok


@pytest.mark.parametrize("seed", [0, 1])
def test_printed_values_compare_as_number_by_number(tmp_path, seed):
    from nbtrace.diff.measure.metrics import printed_numbers

    model, inputs = build_demo(num_layers=2, seq_len=40, seed=seed)  # 40 x 64 > 1000 elements: torch summarises
    port, _ = build_demo(num_layers=2, seq_len=40, seed=seed)
    with torch.no_grad():
        port.layers[1].mlp.up_proj.weight.mul_(1.001)
        port.layers[1].mlp.down_proj.weight[0, :3] = math.nan
    for name, m in (("a", model), ("b", port)):
        with torch.no_grad(), nbtrace.trace(m, debug_path=tmp_path / name, do_prune_layers=False):
            m(**inputs)
    comparison = nbtrace.compare(tmp_path / "a", tmp_path / "b")
    seen = {"ok": 0, "differs": 0, "broken": 0}
    for match in comparison.matches:
        tensors_b = {(io, arg): t for io, arg, t in match.b.tensors()}
        for io, arg, tensor in match.a.tensors():
            diff = next((d for d in match.diffs if d.io == io and d.arg == arg), None)
            if diff is None or diff.basis != "printed":
                continue
            exact = tensor.dtype != "torch.float32"
            xs, ys = printed_numbers(tensor, exact), printed_numbers(tensors_b[(io, diff.b_arg)], exact)
            delta, ok = _printed_by_loop(xs, ys, diff.rtol, diff.atol)
            assert _close(diff.max_abs, delta), (match.a.module_path, arg)
            seen["broken" if delta == math.inf else "ok" if ok else "differs"] += 1
    assert seen["ok"] > 10 and seen["differs"] > 0 and seen["broken"] > 0, seen


def test_the_collector_is_left_as_it_was(tmp_path):
    import gc

    from nbtrace.core.collector import collector_paused

    model, inputs = build_demo(num_layers=2, seq_len=8, seed=6)
    a = _traced(model, inputs, tmp_path / "a")
    assert gc.isenabled()
    nbtrace.compare(a, a)
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert gc.get_count()[0] < 1000  # (~3,700 otherwise) what the comparison made is not left for the next collection to scan
    gc.disable()
    try:
        nbtrace.compare(a, a)
        assert not gc.isenabled()  # a process that paused it keeps it paused
    finally:
        gc.enable()
    kept = [[] for _ in range(10)]
    gc.freeze()  # a process that froze its objects (before forking, say) keeps them frozen
    try:
        frozen = gc.get_freeze_count()
        with collector_paused():
            made = [[] for _ in range(10)]
        assert gc.get_freeze_count() == frozen and gc.isenabled() and made and kept
    finally:
        gc.unfreeze()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("inside")
    assert gc.isenabled()
