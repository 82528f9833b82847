"""Full tensors (``use_repr=False``): files written by a background writer, and no silent loss.

A disk that fills up mid-forward must end the capture with an error that names the
folder and how much it needed, restore every forward, and leave a trace that claims
no file it does not have (the failed forward is marked with the error, as a crashed
forward's is). The disk is simulated: the low-level file write raises ENOSPC after a
number of files (``tests`` cannot mount a small tmpfs everywhere).
"""

from __future__ import annotations

import errno
import json
import os

import pytest
import torch
from safetensors.torch import load_file

import nbtrace
from nbtrace.capture import write, writer
from nbtrace.demo import build_demo


_WRITE_FILE = writer.write_file


def _full_disk_after(monkeypatch, files: int) -> list[str]:
    """Every file write after the first ``files`` fails as on a full disk; returns the names attempted."""
    attempted: list[str] = []
    original = _WRITE_FILE

    def write_file(data, tmp, target, ready=None):
        attempted.append(os.path.basename(target))
        if len(attempted) > files:
            with open(tmp, "wb") as handle:  # a partial temporary file, as a real full disk leaves one
                handle.write(b"\0" * 10)
            os.unlink(tmp)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return original(data, tmp, target, ready)

    monkeypatch.setattr(write, "write_file", write_file)
    monkeypatch.setattr(writer, "write_file", write_file)  # a hard link's fallback writes through it
    return attempted


def _no_forward_left(model: torch.nn.Module) -> bool:
    return all("forward" not in module.__dict__ for module in model.modules())


@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("background", [False, True])
def test_a_full_disk_ends_the_capture_with_an_error_and_an_honest_trace(tmp_path, monkeypatch, background, last):
    monkeypatch.setattr(writer, "BACKGROUND_ON_CPU", background)
    model, inputs = build_demo(num_layers=2)
    files = 12
    if last:  # the disk fills at the model's own outputs, the last file of the forward (no hard links: written)
        monkeypatch.setattr(os, "link", lambda *args: (_ for _ in ()).throw(OSError(errno.EPERM, "no links")))
        counted = _full_disk_after(monkeypatch, files=10**6)
        with nbtrace.trace(model, debug_path=tmp_path / "count", use_repr=False, do_prune_layers=False):
            model(**inputs)
        files = len(counted) - 1
        assert counted[-1].startswith("DemoLM_outputs")
    attempted = _full_disk_after(monkeypatch, files=files)
    with pytest.raises(OSError) as caught:
        with nbtrace.trace(model, debug_path=tmp_path, use_repr=False, do_prune_layers=False):
            model(**inputs)
    error = caught.value
    assert error.errno == errno.ENOSPC
    assert str(tmp_path) in str(error) and "needed at least" in str(error) and attempted[files] in str(error)
    assert _no_forward_left(model)
    assert not list(tmp_path.glob(".*.tmp"))
    trace = nbtrace.load_trace(tmp_path)
    full = json.loads((tmp_path / "DemoLM_debug_tree_FULL_TENSORS.json").read_text())
    assert full["error"]["type"] == "OSError" and "No space left" in full["error"]["message"]
    refs = [value for node in trace.nodes() for _, _, value in node.tensors() if value.ref is not None]
    assert refs  # the files written before the disk filled (some hard-linked to a repeat of their tensor)
    for value in refs:  # every file the trace claims is there, whole
        assert value.load() is not None
    if background and not last:  # records made before their file failed in the thread: no value, no dead reference
        assert any(value.value is None for node in trace.nodes() for _, _, value in node.tensors())


def test_the_background_writer_writes_the_same_files(tmp_path, monkeypatch):
    model, inputs = build_demo(num_layers=2)
    for name, background in (("here", False), ("thread", True)):
        monkeypatch.setattr(writer, "BACKGROUND_ON_CPU", background)
        with nbtrace.trace(model, debug_path=tmp_path / name, use_repr=False, do_prune_layers=False):
            model(**inputs)
    here = sorted(path.name for path in (tmp_path / "here").iterdir())
    assert here == sorted(path.name for path in (tmp_path / "thread").iterdir())
    for name in here:
        a, b = tmp_path / "here" / name, tmp_path / "thread" / name
        if name.endswith(".json"):
            assert a.read_bytes() == b.read_bytes() or "_NBTRACE" in name, name
        else:
            assert torch.equal(load_file(a)["data"], load_file(b)["data"]), name


def test_the_writer_queue_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "BACKGROUND_ON_CPU", True)
    monkeypatch.setattr(writer, "QUEUE_BYTES", 4096)
    queued: list[int] = []
    original = write.write_file

    def write_file(data, tmp, target, ready=None):
        queued.append(store_writer[0]._queued)
        return original(data, tmp, target, ready)

    store_writer: list[writer.FileWriter] = []
    original_init = writer.FileWriter.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        store_writer.append(self)

    monkeypatch.setattr(writer.FileWriter, "__init__", init)
    monkeypatch.setattr(write, "write_file", write_file)
    model, inputs = build_demo(num_layers=1, seq_len=8)
    with nbtrace.trace(model, debug_path=tmp_path, use_repr=False, do_prune_layers=False):
        model(**inputs)
    largest = max(path.stat().st_size for path in tmp_path.glob("*.safetensors"))
    assert queued and max(queued) <= 4096 + largest


def test_a_safetensors_disk_error_is_an_os_error(tmp_path, monkeypatch):
    """safetensors reports a full disk as its own error type: the writer turns it into the OSError it is."""
    import safetensors.torch

    def full(tensors, path):
        raise RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    with pytest.raises(OSError) as caught:
        writer.write_file(torch.zeros(3), str(tmp_path / ".x.tmp"), str(tmp_path / "x.safetensors"))
    assert caught.value.errno == errno.ENOSPC
    assert not list(tmp_path.iterdir())

    def broken(tensors, path):
        raise RuntimeError("not a disk problem")

    monkeypatch.setattr(safetensors.torch, "save_file", broken)
    with pytest.raises(RuntimeError):  # other errors stay what they are (the serializer prints such tensors)
        writer.write_file(torch.zeros(3), str(tmp_path / ".x.tmp"), str(tmp_path / "x.safetensors"))
