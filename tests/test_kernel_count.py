"""Kernels per recorded tensor: the aten operations nbtrace dispatches for its summaries.

On a GPU each aten operation is (at least) one kernel launch, and with a plain forward
that is fast the launches are what a trace costs. These tests trace a model on the
CPU with every tensor treated as if it lived on a device (``host_readable`` -> False,
so the device code path runs), count every aten operation dispatched while the traced
forward runs (a ``TorchDispatchMode``), subtract the plain forward's, and divide by the
recorded tensors.

The budget per tensor is what torch's own printed numbers allow (docs/performance.md):
``mean``, ``std`` and ``aminmax`` for the four statistics (the fused ``std_mean`` and
``var_mean`` give a mean with other bits than ``mean()``, so they are not used), one
copy of the printed elements (``take``, or ``clone`` when every element is printed),
and a small share of the joins into the forward's one transfer.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import nbtrace
from nbtrace.capture import printing, transfer
from nbtrace.capture.sketch import RunSketch
from nbtrace.demo import build_demo

STATISTICS = Counter({"aten.mean": 1, "aten.std": 1, "aten.aminmax": 1})  # per floating tensor
PRINTED = {"aten.take", "aten.clone"}  # one of them per tensor whose elements are printed
JOINS = {"aten.stack", "aten.cat", "aten._to_copy"}  # joining pieces for the one transfer (transfer.HostBatch)
JOIN_SHARE = 0.02  # joins per recorded tensor: one per 256 pieces of a kind (0-dim stats, printed elements)
JOINS_PER_FORWARD = 12  # and a few per kind of piece (dtype, 0-dim or not) for the forward's one transfer
PER_FORWARD = {"aten.topk", "aten.sub"}  # the picked token of a language model's forward (capture/generation.py)
#: per parameter or buffer, every forward: the stamp that proves a weight's fingerprint computed before still holds
#: (capture/parameters.py: an edit through ``.data`` bumps no version the parameter shows, and a file never lies)
STAMP = {"aten.sum", "aten.index_select"}


HOST_ONLY = {transfer.checksum.__code__}  # reads host copies only (it refuses a tensor on a device): no kernel
#: the run's sketch of a printed trace without its twin (capture/sketch.py): its own few kernels per sketched tensor,
#: counted apart from the summaries'
SKETCH_CODE = {RunSketch.__init__.__code__, RunSketch._numbers.__code__, RunSketch._keep.__code__}
#: per sketched tensor (measured: 10.3 on the demo): its float64 copy, the padding rows zeroed, the last chunk padded,
#: two matrix-vector products (and their squeezes), the sum of squares, one join
SKETCH_PER_TENSOR = 12
SKETCH_PER_FORWARD = 12  # finding the padding mask and its digest, once per forward
#: the sketch's pieces (float64 sums, counts) are kinds of their own in the forward's one transfer: a few joins more
SKETCH_JOINS = 6
SKETCHES: list[Counter] = []


class OpCounter(TorchDispatchMode):
    """Counts the aten operations dispatched inside it that would launch a kernel on a GPU.

    Views launch none, and neither does work on the host copies that crossed already.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter = Counter()
        self.sketch: Counter = Counter()  # the run's sketch's (``SKETCH_CODE``)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and not _inside(HOST_ONLY):
            (self.sketch if _inside(SKETCH_CODE) else self.ops)[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def _inside(codes: set, depth: int = 10) -> bool:
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return False
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def nbtrace_ops(model, inputs, folder: Path, **options) -> tuple[Counter, nbtrace.Recorder]:
    """The aten operations a traced forward dispatches beyond the plain forward's, and its recorder (the capture
    itself: the float64 twin, which runs the model again, is off). The run's sketch's operations are counted apart,
    in ``SKETCHES[-1]``."""
    options.setdefault("measure_rounding", False)
    with torch.no_grad():
        with OpCounter() as plain:
            model(**inputs)
        with nbtrace.trace(model, debug_path=folder / "warm", **options):
            model(**inputs)  # the parameters' fingerprints are computed once per process: not per forward
        with nbtrace.trace(model, debug_path=folder / "counted", **options) as rec:
            with OpCounter() as traced:
                model(**inputs)
    extra = traced.ops.copy()
    extra.subtract(plain.ops)
    SKETCHES.append(traced.sketch)
    return +extra, rec


def recorded(rec: nbtrace.Recorder) -> tuple[int, int]:
    """(recorded tensors, floating ones among them) of the recorder's trace."""
    values = [value for node in rec.trace.nodes() for _, _, value in node.tensors()]
    floating = sum(value.dtype in ("torch.float32", "torch.bfloat16", "torch.float16") for value in values)
    return len(values), floating


def check_budget(ops: Counter, tensors: int, floating: int, printed: bool, weights: int = 0,
                 sketched: bool = False) -> None:
    """Fails (naming the operations) when the summaries take more than their budget; ``weights``: the model's
    parameters and buffers, each stamped once per forward (``STAMP``).

    A tensor seen before and provably unchanged is not summarised again: fewer is fine.
    """
    for name, n in STATISTICS.items():
        assert ops[name] <= n * floating, (name, ops[name], floating)
    copies = sum(ops[name] for name in PRINTED)
    assert copies <= (tensors if printed else 0), (copies, tensors)
    joins = sum(ops[name] for name in JOINS)
    per_forward = JOINS_PER_FORWARD + (SKETCH_JOINS if sketched else 0)
    assert joins <= JOIN_SHARE * (tensors + 2 * weights) + per_forward, (joins, tensors)
    forward = sum(ops[name] for name in PER_FORWARD)
    assert forward <= len(PER_FORWARD), forward
    stamps = sum(ops[name] for name in STAMP)
    assert stamps <= len(STAMP) * weights, (stamps, weights)
    other = {name: n for name, n in ops.items()
             if name not in STATISTICS and name not in PRINTED | JOINS | PER_FORWARD | STAMP}
    assert not other, f"operations outside the budget: {other}"
    budget = len(STATISTICS) * floating + (tensors if printed else 0) + JOIN_SHARE * (tensors + 2 * weights) \
        + per_forward + len(PER_FORWARD) + len(STAMP) * weights
    assert sum(ops.values()) <= budget


def _weights(model) -> int:
    return sum(1 for _ in model.parameters()) + sum(1 for _ in model.buffers())


@pytest.fixture
def on_device(monkeypatch) -> None:
    monkeypatch.setattr(transfer, "host_readable", lambda tensor: False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_printed_summaries_take_three_reductions_and_one_copy_per_tensor(tmp_path, on_device, dtype):
    model, inputs = build_demo(num_layers=3)
    model = model.to(dtype)
    ops, rec = nbtrace_ops(model, inputs, tmp_path, do_prune_layers=False)
    tensors, floating = recorded(rec)
    assert tensors > 40 and floating > 30
    check_budget(ops, tensors, floating, printed=True, weights=_weights(model), sketched=True)
    sketched = sum(len(places) for places in rec.trace.sidecar["sketch"]["calls"].values())
    assert 0 < sum(SKETCHES[-1].values()) <= SKETCH_PER_TENSOR * sketched + SKETCH_PER_FORWARD, \
        (SKETCHES[-1], sketched)
    summaries = sum(ops.values()) - sum(ops[name] for name in STAMP)  # the weights' stamps: per weight, above
    assert summaries / tensors <= 4  # the four statistics and the printed elements, per recorded tensor


def test_safetensors_summaries_take_the_three_reductions_only(tmp_path, on_device):
    model, inputs = build_demo(num_layers=3)
    ops, rec = nbtrace_ops(model, inputs, tmp_path, use_repr=False)
    tensors, floating = recorded(rec)
    data = {name: ops.pop(name) for name in ("aten.cat", "aten.clone") if name in ops}
    records = 2 * len(rec.trace.nodes())
    assert sum(data.values()) <= records  # the files' data: at most one join per record, not a copy per tensor
    check_budget(ops, tensors, floating, printed=False, weights=_weights(model))
    assert (sum(ops.values()) - sum(ops[name] for name in STAMP)) / tensors <= 3


def test_the_count_fails_when_a_summary_dispatches_one_more_operation(tmp_path, on_device, monkeypatch):
    """The test above can fail: a cast before the reductions (as a careless fix might add) is caught."""
    original = printing.stat_pieces

    def with_a_cast(tensor: torch.Tensor) -> list[torch.Tensor]:
        return original(tensor.to(torch.float64).to(tensor.dtype))  # the same values, two more kernels

    monkeypatch.setattr(printing, "stat_pieces", with_a_cast)
    import nbtrace.capture.serialize as serialize

    monkeypatch.setattr(serialize, "stat_pieces", with_a_cast)
    model, inputs = build_demo(num_layers=3)
    ops, rec = nbtrace_ops(model, inputs, tmp_path)
    tensors, floating = recorded(rec)
    with pytest.raises(AssertionError):
        check_budget(ops, tensors, floating, printed=True, weights=_weights(model))


def test_the_statistics_are_the_bits_of_the_ops_users_call():
    """mean, std and aminmax give the bits of ``mean()``, ``std()``, ``min()``, ``max()`` (what transformers prints)."""
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for size in (2, 7, 1000, 4099):
            tensor = (torch.randn(size, generator=gen) * 3 + 0.5).to(dtype)
            pieces = printing.stat_pieces(tensor)
            want = [tensor.mean(), tensor.std(), tensor.min(), tensor.max()]
            assert all(torch.equal(a, b) for a, b in zip(pieces, want)), (dtype, size)
    one = printing.stat_pieces(torch.tensor([2.5]))
    assert math.isnan(one[1].item())
