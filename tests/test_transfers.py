"""Device-to-host transfers: every one goes through ``capture/transfer.py``, one per forward for the summaries.

On a GPU each transfer is a synchronisation. These tests run on the CPU with every
tensor treated as if it lived on a device (``host_readable`` -> False), count
every read of tensor values the capture makes, and check that the files are the
same bytes as when tensors are read where they are.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import nbtrace
from nbtrace.capture import transfer
from nbtrace.demo import build_demo
from tests.test_fast_path import InPlace

#: the float64 twin's mode, through which the model's own operations run (its ``.to(device)`` is the model's)
_MODEL_OPS = "nbtrace.capture.twin.widen"
_READS = ["tolist", "item", "cpu", "numpy", "__int__", "__float__", "__bool__", "__index__", "__array__",
          "__repr__", "__str__", "__format__"]


@pytest.fixture
def reads(monkeypatch) -> Counter:
    """Counts (calling module, method) for every read of a tensor's values made by nbtrace's code."""
    counts: Counter = Counter()

    def counting(name, original):
        def read(self, *args, **kwargs):
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller.startswith("nbtrace") and caller != _MODEL_OPS:
                counts[caller, name] += 1
            return original(self, *args, **kwargs)

        return read

    for name in _READS:
        monkeypatch.setattr(torch.Tensor, name, counting(name, getattr(torch.Tensor, name)))
    original_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        target = kwargs.get("device", args[0] if args else None)
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if str(target).startswith("cpu") and caller.startswith("nbtrace") and caller != _MODEL_OPS:
            counts[caller, "to"] += 1
        return original_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    return counts


@pytest.fixture
def on_device(monkeypatch) -> None:
    """Every tensor counts as living on a device: reading it takes a transfer."""
    monkeypatch.setattr(transfer, "host_readable", lambda tensor: False)


def transfers(counts: Counter) -> int:
    return counts["nbtrace.capture.transfer", "cpu"]


def elsewhere(counts: Counter) -> dict:
    """Reads of tensor values anywhere but in transfer.py (where only host copies are read)."""
    return {key: n for key, n in counts.items() if key[0] != "nbtrace.capture.transfer"}


def run(model, inputs, folder: Path, **options) -> nbtrace.Recorder:
    options.setdefault("measure_rounding", False)  # the capture itself; the float64 twin's transfer: below
    with nbtrace.trace(model, debug_path=folder, **options) as rec:
        model(**inputs)  # grad mode on, as in a notebook cell
    return rec


@pytest.mark.parametrize("prune", [True, False])
def test_printed_values_and_stats_of_a_forward_cross_in_one_transfer(tmp_path, reads, on_device, prune):
    model, inputs = build_demo(num_layers=4)
    rec = run(model, inputs, tmp_path, do_prune_layers=prune)
    assert transfers(reads) == 1
    assert elsewhere(reads) == {}
    records = sum(1 for node in rec.trace.nodes() for _ in node.tensors())
    assert records > 40  # many tensors, one transfer
    with nbtrace.trace(model, debug_path=tmp_path / "two", measure_rounding=False) as rec:
        model(**inputs)
        model(**inputs)
    assert transfers(reads) == 1 + 2  # one per forward


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("use_repr", [True, False])
def test_the_float64_twin_joins_the_forwards_one_transfer(tmp_path, reads, on_device, use_repr, dtype):
    model, inputs = build_demo(num_layers=3)
    model.to(dtype)
    plain = run(model, inputs, tmp_path / "plain", use_repr=use_repr)
    before = transfers(reads)
    twinned = run(model, inputs, tmp_path / "twin", use_repr=use_repr, measure_rounding="twin")
    # every call, the pruned layers' too (the twin keeps what pruning leaves out of the files)
    assert twinned.trace.twin is not None and len(twinned.trace.twin.calls) >= len(twinned.trace.nodes())
    kept = 1 if use_repr else 0  # the top-level inputs, kept whole beside a trace that only prints them
    # a model stored wider than bfloat16: whether rounding into it changes a weight or an input (twin/exact.py),
    # read once per forward and device; the twin's fingerprints add no transfer of their own
    decided = 1 if dtype == torch.float32 else 0
    assert transfers(reads) - before == before + kept + decided
    assert elsewhere(reads) == {} and plain.trace.twin is None


@pytest.mark.parametrize("prune", [True, False])
def test_safetensors_data_moves_once_per_record(tmp_path, reads, on_device, prune):
    model, inputs = build_demo(num_layers=4)
    rec = run(model, inputs, tmp_path, do_prune_layers=prune, use_repr=False)
    files = len(list(tmp_path.glob("*.safetensors")))
    calls = len(rec.trace.nodes())
    # stats: one transfer for the forward; data: one per record (a call's inputs, a leaf's outputs)
    assert transfers(reads) <= 1 + 2 * calls
    assert transfers(reads) < files  # some records hold several tensors: not one transfer per tensor
    assert elsewhere(reads) == {}


@pytest.mark.parametrize("use_repr", [True, False])
@pytest.mark.parametrize("prune", [True, False])
@pytest.mark.parametrize("name", ["demo", "inplace"])
def test_on_a_device_the_files_are_the_same_bytes(tmp_path, monkeypatch, name, use_repr, prune):
    torch.manual_seed(0)
    model, inputs = build_demo(num_layers=3) if name == "demo" else (InPlace().eval(), {"x": torch.randn(4, 6)})
    options = {"use_repr": use_repr, "do_prune_layers": prune}
    here = run(model, inputs, tmp_path / "here", **options)
    monkeypatch.setattr(transfer, "host_readable", lambda tensor: False)
    there = run(model, inputs, tmp_path / "device", **options)
    assert here.trace.to_dict() == there.trace.to_dict()
    for path in sorted((tmp_path / "here").iterdir()):
        twin = tmp_path / "device" / path.name
        if path.suffix == ".json":
            assert path.read_bytes() == twin.read_bytes(), path.name
        else:
            assert torch.equal(load_file(path)["data"], load_file(twin)["data"]), path.name
    assert sorted(p.name for p in (tmp_path / "here").iterdir()) == sorted(p.name for p in (tmp_path / "device").iterdir())


def test_a_batch_brings_back_exact_values_of_every_dtype(reads, on_device):
    pieces = [
        torch.tensor([0.0, -0.0, math.nan, math.inf, -math.inf, 1e-40, 3.5], dtype=dtype)
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64)
    ] + [
        torch.tensor([True, False]),
        torch.tensor([-128, 127], dtype=torch.int8),
        torch.tensor([2**62, -(2**63)], dtype=torch.int64),
        torch.tensor([2**64 - 1, 7], dtype=torch.uint64),
        torch.tensor([65535], dtype=torch.uint16),
    ]
    batch = transfer.HostBatch()
    slots = [batch.add(piece) for piece in pieces]
    scalars = batch.add_scalars([torch.tensor(1.25), torch.tensor(-0.0), torch.tensor(math.nan)])
    batch.fetch()
    assert transfers(reads) == 1
    for piece, slot in zip(pieces, slots):
        got, want = slot.values(), piece.tolist()
        assert [repr(v) for v in got] == [repr(v) for v in want], piece.dtype
    assert [repr(v) for v in scalars.values()] == ["1.25", "-0.0", "nan"]


def test_tensors_of_mixed_sizes_move_in_one_transfer_and_come_back_equal(reads, on_device):
    tensors = [torch.tensor([True, False, True]), torch.arange(5, dtype=torch.int64), torch.randn(3, 2).t(),
               torch.randn(7, dtype=torch.float16), torch.zeros(0, 3), torch.tensor(2.5, dtype=torch.float64)]
    hosts = transfer.to_host_many(tensors)
    assert transfers(reads) == 1
    for tensor, host in zip(tensors, hosts):
        assert host.dtype == tensor.dtype and host.shape == tensor.shape and torch.equal(host, tensor)


def test_many_pieces_are_joined_on_the_device_and_still_come_back_in_order(reads, on_device):
    gen = torch.Generator().manual_seed(0)
    scalars = [torch.randn((), generator=gen) for _ in range(1000)]
    flats = [torch.randn(int(n), generator=gen) for n in torch.randint(1, 40, (600,), generator=gen)]
    batch = transfer.HostBatch()
    slots = [batch.add_scalars(scalars[i : i + 4]) for i in range(0, 1000, 4)] + [batch.add(f) for f in flats]
    batch.fetch()
    assert transfers(reads) == 1
    want = [[t.item() for t in scalars[i : i + 4]] for i in range(0, 1000, 4)] + [f.tolist() for f in flats]
    assert [slot.values() for slot in slots] == want


def test_pieces_in_host_memory_are_read_at_once_and_not_kept(reads):
    import weakref

    batch = transfer.HostBatch()
    piece, scalars = torch.tensor([1.5, -0.0, 2.0]), [torch.tensor(0.25), torch.tensor(-1.0)]
    refs = [weakref.ref(t) for t in (piece, *scalars)]
    slots = batch.add(piece), batch.add_scalars(scalars)
    del piece, scalars
    assert all(ref() is None for ref in refs)  # nothing small stays alive between the model's tensors
    assert [repr(v) for v in slots[0].values()] == ["1.5", "-0.0", "2.0"] and slots[1].values() == [0.25, -1.0]
    batch.fetch()
    assert transfers(reads) == 0


def test_a_generate_step_with_its_cache_and_weights_crosses_in_one_transfer(tmp_path, reads, monkeypatch):
    """The KV cache facts, the picked token and the parameter fingerprints ride with the forward's transfer."""
    from tests.models.generation import build_reference, make_prompt, trace_generate

    prompt, steps = make_prompt(), 3
    options = {"use_repr": True}  # printed values: no safetensors data to move
    here = trace_generate(build_reference(), prompt, steps, tmp_path / "here", **options)  # fresh weights
    reads.clear()
    monkeypatch.setattr(transfer, "host_readable", lambda tensor: False)
    there = trace_generate(build_reference(), prompt, steps, tmp_path / "device", **options)
    assert len(there) == steps
    # one per forward (the first one's includes every weight's fingerprint), one for its top-level inputs,
    # which a trace of printed values keeps whole beside its float64 twin (``inputs`` section), and one for
    # whether rounding this float32 model into bfloat16 changes a weight or an input (``twin/exact.py``)
    assert transfers(reads) == 3 * steps
    assert elsewhere(reads) == {}
    for a, b in zip(here.traces, there.traces):
        assert a.sidecar["parameters"] and a.sidecar["parameters"] == b.sidecar["parameters"]
        assert a.sidecar["generation"]["cache"]["new_keys"] and a.sidecar["generation"] == b.sidecar["generation"]
    for path in sorted((tmp_path / "here").rglob("*.json")):
        twin = tmp_path / "device" / path.relative_to(tmp_path / "here")
        if path.name.endswith("_NBTRACE.json"):  # the sidecar: the same but for the timings of its run section
            a, b = json.loads(path.read_text())["sections"], json.loads(twin.read_text())["sections"]
            assert a.pop("run")["forward"] == b.pop("run")["forward"] and a == b, path
        else:
            assert path.read_bytes() == twin.read_bytes(), path
