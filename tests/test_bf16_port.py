"""A float32 original against its bfloat16 port: the port's weights rounded to bfloat16 are its rounding, accounted
exactly (the original's twin also ran with its model rounded to bfloat16), so a correct port agrees and a semantic
difference far below bfloat16's rounding (GELU's tanh form, a norm's eps, a 2% attention scale) is named where it is
born. On a published library (openai-whisper, the original) and transformers' port of it, folders and live."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import nbtrace
from tests.models import whisper_pair


def _gelu_tanh(port: nn.Module) -> None:
    port.model.decoder.layers[0].activation_fn = nn.GELU(approximate="tanh")


def _eps(port: nn.Module) -> None:
    port.model.decoder.layers[1].final_layer_norm.eps = 1e-2


def _scale(port: nn.Module) -> None:
    port.model.decoder.layers[0].self_attn.scaling *= 1.02


def _weight(port: nn.Module) -> None:
    with torch.no_grad():
        port.model.encoder.layers[1].fc2.weight.mul_(1.05)


BUGS = {
    "clean": (None, None),
    "gelu tanh": (_gelu_tanh, "Whisper.decoder.blocks.0.mlp.1"),
    "layer norm eps": (_eps, "Whisper.decoder.blocks.1.mlp_ln"),
    "attention scale": (_scale, "Whisper.decoder.blocks.0.attn"),
    "weight scaled": (_weight, "Whisper.encoder.blocks.1.mlp.2"),
}


@pytest.fixture(scope="module", params=[0, 3])
def original_folder(request, tmp_path_factory):
    seed = request.param
    original = whisper_pair.build_original(seed)
    mel, tokens = whisper_pair.inputs(seed)
    folder = tmp_path_factory.mktemp(f"whisper_{seed}") / "original"
    with nbtrace.trace(original, debug_path=folder):  # the defaults: printed values, pruned layers, the twin
        original(mel, tokens)
    return seed, original, folder


def _port(original: nn.Module, bug) -> nn.Module:
    port = whisper_pair.build_port(original)
    if bug is not None:
        bug(port)
    return port.to(torch.bfloat16)


@pytest.mark.parametrize("case", sorted(BUGS))
def test_a_bf16_port_against_the_float32_folder_live(original_folder, case):
    seed, original, folder = original_folder
    bug, where = BUGS[case]
    c = nbtrace.compare(folder, _port(original, bug), inputs_map=whisper_pair.PORT_ARGUMENTS)
    found = c.first_divergence.module_path if c.first_divergence is not None else None
    assert found == where, c.summary()
    if where is None:
        assert c.agree


@pytest.mark.parametrize("case", ["clean", "gelu tanh", "layer norm eps"])
def test_a_bf16_port_folder_against_the_float32_folder(original_folder, tmp_path, case):
    seed, original, folder = original_folder
    bug, where = BUGS[case]
    port = _port(original, bug)
    mel, tokens = whisper_pair.inputs(seed)
    with nbtrace.trace(port, debug_path=tmp_path / "port"):
        port(input_features=mel.to(torch.bfloat16), decoder_input_ids=tokens, use_cache=False)
    c = nbtrace.compare(folder, tmp_path / "port")
    found = c.first_divergence.module_path if c.first_divergence is not None else None
    assert found == where, c.summary()


def test_the_original_twin_records_its_bf16_run_and_a_bf16_model_does_not(original_folder, tmp_path):
    seed, original, folder = original_folder
    a = nbtrace.load_trace(folder)
    assert all(p.bf16 is not None for p in a.twin.of(a.root).values())
    port = _port(original, None)
    mel, tokens = whisper_pair.inputs(seed)
    with nbtrace.trace(port, debug_path=tmp_path / "port"):
        port(input_features=mel.to(torch.bfloat16), decoder_input_ids=tokens, use_cache=False)
    b = nbtrace.load_trace(tmp_path / "port")
    assert all(p.bf16 is None for p in b.twin.of(b.root).values())


# transformers' Llama (float32, eager) against its sdpa port cast to bfloat16: its rotary frequencies, a buffer
# outside the state_dict, are the original's rounded to bfloat16 too, matched by the twin's rounded digests
@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    from tests.models.precision import build_reference, make_inputs

    reference = build_reference(torch.float32, seed=1)
    folder = tmp_path_factory.mktemp("llama") / "reference"
    with torch.no_grad(), nbtrace.trace(reference, debug_path=folder):
        reference(**make_inputs(2), use_cache=False)
    return reference, folder


@pytest.mark.parametrize("case", ["clean", "gelu_tanh", "attn_scale", "down_scale"])
def test_a_bf16_llama_port_against_its_float32_folder(llama_folder, case):
    from tests.models.precision import CASES

    reference, folder = llama_folder
    found = next(c for c in CASES if c.name == case)
    c = nbtrace.compare(folder, found.make_port(reference).to(torch.bfloat16))
    named = c.first_divergence.module_path if c.first_divergence is not None else None
    assert named == found.expected("bf16"), c.summary()
    assert c.decided_by == "float64 twins"
