"""``generate`` of an encoder-decoder (transformers' Whisper from a tiny config, tests/models/speech_generation.py):
the encoder, which ``generate`` runs once outside the model's forward, is recorded as a forward of its own rooted at
``model.encoder``, with its float64 twin, before every decoder step; two runs compared step by step name the first
diverging forward and the module in it, for a bug in the encoder and for one in the decode steps only."""

from __future__ import annotations

import logging

import pytest

import nbtrace
from tests.models import speech_generation as sg
from tests.models.precision import one_thread  # noqa: F401  (a module fixture: one torch thread)


@pytest.fixture(autouse=True)
def quiet_transformers():
    logging.disable(logging.WARNING)  # generate's advice about its own arguments
    yield
    logging.disable(logging.NOTSET)


def _run(model, mel, folder, **options):
    with nbtrace.trace(model, debug_path=folder, **options) as recorder:
        sg.generate(model, mel)
    return folder, recorder


@pytest.fixture(scope="module", params=[0, 1], ids=["seed0", "seed1"])
def case(request, tmp_path_factory):
    seed = request.param
    base = tmp_path_factory.mktemp(f"whisper{seed}")
    logging.disable(logging.WARNING)
    reference, mel = sg.build_reference(seed), sg.make_mel(seed)
    folder, recorder = _run(reference, mel, base / "original")
    return reference, mel, folder, recorder, base


def test_the_encoder_is_recorded_once_then_every_decoder_step(case):
    _, _, folder, recorder, _ = case
    traces = nbtrace.load_traces(folder)
    assert len(traces) == len(recorder) >= 3
    assert traces[0].model_name == f"{sg.ROOT}.model.encoder"
    assert traces[0].nodes()[1].module_path == f"{sg.ROOT}.model.encoder.conv1"
    assert all(t.model_name == sg.ROOT for t in traces[1:])
    assert traces[0].twin is not None and traces[0].twin.calls  # the encoder's own float64 twin
    paths = [n.module_path for t in traces[1:] for n in t.nodes()]
    assert not any(p.startswith(f"{sg.ROOT}.model.encoder") for p in paths)  # the steps hold the decoder only
    assert any(p.startswith(f"{sg.ROOT}.model.decoder.layers") for p in paths)


def test_a_correct_port_agrees_at_every_step(case):
    reference, mel, folder, _, base = case
    port, _ = _run(sg.make_port(reference), mel, base / "clean")
    steps = nbtrace.compare(folder, port)
    assert steps.verdict == "agree" and steps.first_divergence is None, steps.summary()


@pytest.mark.parametrize("bug", sorted(sg.BUGS))
def test_the_first_diverging_step_and_module_are_named(case, bug):
    reference, mel, folder, _, base = case
    port, _ = _run(sg.make_port(reference, bug), mel, base / bug)
    first = nbtrace.compare(folder, port).first_divergence
    assert first is not None and (first.step, first.module_path) == sg.BUGS[bug], first
