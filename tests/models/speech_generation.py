"""transformers' Whisper from a tiny config, and ports of it with a bug, for ``generate`` of an encoder-decoder.

``generate`` runs the encoder once, outside the model's forward, then one decoder forward per token: nbtrace
records the encoder as a forward of its own (``forward_0``, rooted at ``model.encoder``) and every decoder step.
``make_port(reference, bug)`` copies the reference with one bug: ``"encoder_weight"`` (the first encoder layer's
``fc1`` weight converted 1% off: the encoder's forward differs) or ``"decode_positions"`` (the decoder's learned
positions read one place off once its cache holds tokens: the first decoder forward agrees, the next does not).
"""

from __future__ import annotations

import copy
import warnings

import torch

ROOT = "WhisperForConditionalGeneration"

#: bug -> (the first forward that differs, the module where it is born)
BUGS = {
    "encoder_weight": (0, f"{ROOT}.model.encoder.layers.0.fc1"),
    "decode_positions": (2, f"{ROOT}.model.decoder.embed_positions"),
}


def build_reference(seed: int = 0):
    """A tiny Whisper (2 encoder and 2 decoder layers, width 64), eager attention, eval mode."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(
        vocab_size=96, num_mel_bins=16, encoder_layers=2, decoder_layers=2, d_model=64, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=16,
        max_target_positions=32, decoder_start_token_id=1, pad_token_id=0, eos_token_id=2, bos_token_id=1,
        begin_suppress_tokens=None, suppress_tokens=None, attn_implementation="eager")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return WhisperForConditionalGeneration(config).eval()


def make_mel(seed: int = 0) -> torch.Tensor:
    """Mel frames ``[1, 16, 32]``."""
    return torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(400 + seed))


class _ShiftedInSteps(torch.nn.Module):
    """Learned positions read one place off once the cache holds tokens (the decode steps), right in the first
    decoder forward."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.weight = inner.weight

    def forward(self, input_ids, cache_length=0, position_ids=None):
        if cache_length > 0 and position_ids is not None:
            position_ids = (position_ids + 1).clamp_max(self.weight.shape[0] - 1)
        if position_ids is None:
            return self.weight[cache_length : cache_length + input_ids.shape[1]]
        return self.weight[position_ids]


def make_port(reference, bug: str | None = None):
    """A copy of ``reference`` with ``bug`` planted (see the module docstring), or an exact copy."""
    port = copy.deepcopy(reference)
    if bug == "encoder_weight":
        with torch.no_grad():
            port.model.encoder.layers[0].fc1.weight.mul_(1.01)
    elif bug == "decode_positions":
        port.model.decoder.embed_positions = _ShiftedInSteps(port.model.decoder.embed_positions)
    elif bug is not None:
        raise ValueError(f"unknown bug {bug!r}")
    return port


def generate(model, mel: torch.Tensor, tokens: int = 4) -> torch.Tensor:
    """Greedy ``generate`` of ``tokens`` new tokens, quietly."""
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        return model.generate(mel, max_new_tokens=tokens, do_sample=False)
