"""nbtrace's sidecar file: written only when a feature has something to say (the run's numerics always do),
read back into Trace.sidecar, moved with its forward, and a malformed one is a TraceFormatError naming it."""

from __future__ import annotations

import json

import pytest

import nbtrace
from nbtrace import TraceFormatError
from nbtrace.capture import recorder as recorder_module
from nbtrace.demo import build_demo

SIDECAR = "DemoLM_debug_tree_NBTRACE.json"


def _run(folder, monkeypatch=None, section=None, forwards=1):
    model, inputs = build_demo(num_layers=2)
    if section is not None:
        original = recorder_module._ForwardRun.__init__

        def init(self, *args, **kwargs):
            original(self, *args, **kwargs)
            self.sidecar["test"] = dict(section)

        monkeypatch.setattr(recorder_module._ForwardRun, "__init__", init)
    with nbtrace.trace(model, debug_path=folder) as rec:
        for _ in range(forwards):
            model(**inputs)
    return rec


def test_a_model_without_parameters_gets_only_the_numerics_and_no_sections_write_nothing(tmp_path):
    import torch

    from nbtrace.capture.write import write_sidecar

    model = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Tanh())  # no parameters: only what the run used
    with nbtrace.trace(model, debug_path=tmp_path, measure_rounding=False) as rec:
        model(torch.randn(2, 3))
    assert set(rec.trace.sidecar) == {"numerics", "sketch"}  # what the run used, and its own sketch of each call
    assert nbtrace.load_trace(tmp_path).sidecar == rec.trace.sidecar
    assert write_sidecar(tmp_path / "empty", "Sequential", {}) is None and not (tmp_path / "empty").exists()


def test_a_section_round_trips_and_moves_with_its_forward(tmp_path, monkeypatch):
    rec = _run(tmp_path, monkeypatch, section={"answer": 42}, forwards=2)
    assert rec.trace.sidecar["test"] == {"answer": 42}
    assert nbtrace.load_trace(tmp_path).sidecar["test"] == {"answer": 42}
    assert (tmp_path / "forward_0" / SIDECAR).is_file()
    assert nbtrace.load_trace(tmp_path / "forward_0").sidecar["test"] == {"answer": 42}


@pytest.mark.parametrize(
    "text, problem",
    [
        ("{", "readable sidecar"),
        ('{"format": "other"}', "not an nbtrace sidecar"),
        ('{"format": "nbtrace-sidecar", "version": 99, "sections": {}}', "version 99"),
        ('{"format": "nbtrace-sidecar", "version": 1, "sections": {"a": 3}}', "object of objects"),
    ],
)
def test_a_malformed_sidecar_is_a_format_error(tmp_path, text, problem):
    _run(tmp_path)
    (tmp_path / SIDECAR).write_text(text)
    with pytest.raises(TraceFormatError, match=problem) as info:
        nbtrace.load_trace(tmp_path)
    assert SIDECAR in str(info.value)
    json.loads((tmp_path / "DemoLM_debug_tree_FULL_TENSORS.json").read_text())  # the trace itself is untouched


def test_the_parameters_text_kept_with_the_fingerprints_is_what_json_writes(tmp_path, monkeypatch):
    """The sidecar splices in the parameters' JSON put together from each fingerprint's kept text: same bytes."""
    import torch

    rec = _run(tmp_path, monkeypatch, section={"answer": [1.5, "x"]}, forwards=3)  # later forwards reuse the texts
    model = rec.model
    with torch.no_grad():
        next(model.parameters())[0] += 1  # changed: fingerprinted and encoded again
    with nbtrace.trace(model, debug_path=tmp_path / "changed") as again:
        model(**build_demo(num_layers=2)[1])
    for folder in (tmp_path, tmp_path / "forward_0", tmp_path / "forward_1", tmp_path / "changed"):
        written = (folder / SIDECAR).read_text()
        document = json.loads(written)
        assert set(document["sections"]) >= {"parameters", "test"}
        assert written == json.dumps(document, indent=1, sort_keys=True)
    assert again.trace.sidecar["parameters"] != rec.trace.sidecar["parameters"]
