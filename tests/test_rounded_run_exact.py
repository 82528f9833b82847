"""A float32 model whose weights and float inputs already hold bfloat16 values (a checkpoint published in bfloat16,
loaded in float32) gets no bfloat16-rounded twin run: that run would compute the twin's numbers bit for bit. The
folder is byte for byte the one the run would have written, a weight or an input that rounding changes makes the
run again, a block whose weights stop being bfloat16 values mid-way starts it from the twin's carried state, and a
bfloat16 port is judged against such an original as before: agreeing where correct, named where not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import nbtrace
from nbtrace.capture.twin import forward as twin_forward
from nbtrace.capture.twin import record
from nbtrace.demo import build_demo


def _round_weights(model: nn.Module) -> nn.Module:
    """``model`` with every float weight set to its bfloat16 rounding (kept in its own dtype)."""
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(tensor.to(torch.bfloat16).to(tensor.dtype))
    return model


@pytest.fixture
def runs(monkeypatch) -> list[list]:
    """The kinds of float64 runs each traced forward made (the twin ``None``, ``"float64"``, ``"bfloat16"``)."""
    made: list[list] = []
    original = twin_forward._twin_runs

    def counting(model, inputs, *args, **kwargs):
        made.append(list(inputs))
        return original(model, inputs, *args, **kwargs)

    monkeypatch.setattr(twin_forward, "_twin_runs", counting)
    return made


def _forced(monkeypatch) -> None:
    """The rounded run made whatever the values (what the capture did before)."""
    monkeypatch.setattr(record, "_unchanged", lambda *args: False)


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by relative path; a sidecar without its run timings (they differ run to run)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if path.name.endswith("_NBTRACE.json"):
            sections = json.loads(data)["sections"]
            sections.pop("run", None)
            data = json.dumps(sections, sort_keys=True).encode()
        found[str(path.relative_to(folder))] = data
    return found


@pytest.mark.parametrize("seed,layers", [(0, 2), (1, 5), (2, 3)])
def test_no_rounded_run_where_rounding_changes_nothing_and_the_folder_is_the_same(tmp_path, runs, monkeypatch,
                                                                                  seed, layers):
    torch.manual_seed(seed)
    model, inputs = build_demo(num_layers=layers)
    _round_weights(model)
    with nbtrace.trace(model, debug_path=tmp_path / "skipped"):
        model(**inputs)
    assert runs == [[None, "float64"]]
    _forced(monkeypatch)
    with nbtrace.trace(model, debug_path=tmp_path / "made"):
        model(**inputs)
    assert runs[1] == [None, "float64", "bfloat16"]
    skipped, made = _files(tmp_path / "skipped"), _files(tmp_path / "made")
    assert len(skipped) == 3 and skipped == made


def test_a_weight_or_a_float_input_that_rounding_changes_makes_the_run(tmp_path, runs):
    model, inputs = build_demo(num_layers=2)
    _round_weights(model)
    name, weight = next((n, p) for n, p in model.named_parameters() if p.dim() == 2)
    with torch.no_grad():  # one element one float32 step away from a bfloat16 value
        weight.view(-1)[7] = torch.nextafter(weight.view(-1)[7], torch.tensor(float("inf")))
    with nbtrace.trace(model, debug_path=tmp_path / "weight"):
        model(**inputs)
    assert runs[-1] == [None, "float64", "bfloat16"], name

    linear = _round_weights(nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 4)))
    exact = torch.randn(3, 8).to(torch.bfloat16).float()
    with nbtrace.trace(linear, debug_path=tmp_path / "exact input"):
        linear(exact)
    assert runs[-1] == [None, "float64"]
    with nbtrace.trace(linear, debug_path=tmp_path / "input"):
        linear(exact + 1e-4)
    assert runs[-1] == [None, "float64", "bfloat16"]
    with nbtrace.trace(linear.to(torch.bfloat16), debug_path=tmp_path / "bfloat16 model"):
        linear(exact.to(torch.bfloat16))
    assert runs[-1] == [None, "float64"]  # stored in bfloat16: no rounded run at all


def _two_forwards(model: nn.Module, folder: Path, nudge: bool) -> None:
    """A prefill and one decode step with transformers' cache in one block; ``nudge``: between them a weight
    stops being a bfloat16 value (as after an optimizer step)."""
    prompt = torch.randint(0, 256, (1, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad(), nbtrace.trace(model, debug_path=folder, use_repr=False, do_prune_layers=False):
        out = model(prompt, use_cache=True)
        if nudge:
            model.model.layers[0].mlp.up_proj.weight.mul_(1 + 2.0**-20)
        key = "cache" if "cache" in out else "past_key_values"  # transformers' name for it since 5.2x, and before
        model(out.logits[:, -1:].argmax(-1), use_cache=True, **{key: out[key]})


@pytest.mark.parametrize("nudge", [False, True])
def test_a_block_whose_weights_stop_being_bfloat16_values_starts_the_run_from_the_twins_state(tmp_path, runs,
                                                                                            monkeypatch, nudge):
    from tests.models.generation import build_reference

    _two_forwards(_round_weights(build_reference()), tmp_path / "skipped", nudge)
    assert runs == [[None, "float64"], [None, "float64"] + (["bfloat16"] if nudge else [])]
    _forced(monkeypatch)
    _two_forwards(_round_weights(build_reference()), tmp_path / "made", nudge)
    skipped, made = _files(tmp_path / "skipped"), _files(tmp_path / "made")
    assert len(skipped) > 10 and skipped == made  # the decode step's rounded run: from its own cache or the copy


@pytest.fixture(scope="module")
def bfloat16_checkpoint(tmp_path_factory):
    """openai-whisper from weights and a spectrogram that hold bfloat16 values, traced with the defaults."""
    from tests.models import whisper_pair

    original = _round_weights(whisper_pair.build_original(5))
    mel, tokens = whisper_pair.inputs(5)
    mel = mel.to(torch.bfloat16).float()
    folder = tmp_path_factory.mktemp("whisper_bf16_checkpoint") / "original"
    with nbtrace.trace(original, debug_path=folder):
        original(mel, tokens)
    return original, mel, tokens, folder


@pytest.mark.parametrize("case,where", [("clean", None), ("gelu tanh", "Whisper.decoder.blocks.0.mlp.1"),
                                        ("layer norm eps", "Whisper.decoder.blocks.1.mlp_ln")])
def test_a_bfloat16_port_against_an_original_from_a_bfloat16_checkpoint(bfloat16_checkpoint, tmp_path, case, where):
    from tests.models import whisper_pair
    from tests.test_bf16_port import BUGS, _port

    original, mel, tokens, folder = bfloat16_checkpoint
    port = _port(original, BUGS[case][0])
    with nbtrace.trace(port, debug_path=tmp_path / "port"):
        port(input_features=mel.to(torch.bfloat16), decoder_input_ids=tokens, use_cache=False)
    for c in (nbtrace.compare(folder, tmp_path / "port"),
              nbtrace.compare(folder, port, inputs_map=whisper_pair.PORT_ARGUMENTS)):
        found = c.first_divergence.module_path if c.first_divergence is not None else None
        assert found == where, c.summary()
        assert c.agree == (where is None)
