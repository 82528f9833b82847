"""openai-whisper (a published library, the original) and transformers' Whisper (the port), built from code with
the original's weights converted into the port by name: their logits agree to 2e-6 in float32."""

from __future__ import annotations

import torch
from torch import nn

from tests.library_support import require_library

#: the original's (mel, tokens) reach the port as its keywords
PORT_ARGUMENTS = {"args.0": "input_features", "args.1": "decoder_input_ids"}

_RENAMES = (
    ("encoder.blocks", "model.encoder.layers"), ("decoder.blocks", "model.decoder.layers"),
    ("encoder.conv", "model.encoder.conv"), ("encoder.ln_post", "model.encoder.layer_norm"),
    ("decoder.ln.", "model.decoder.layer_norm."),
    ("encoder.positional_embedding", "model.encoder.embed_positions.weight"),
    ("decoder.positional_embedding", "model.decoder.embed_positions.weight"),
    ("decoder.token_embedding", "model.decoder.embed_tokens"),
    (".cross_attn_ln.", ".encoder_attn_layer_norm."), (".cross_attn.", ".encoder_attn."),
    (".attn_ln.", ".self_attn_layer_norm."), (".attn.", ".self_attn."),
    (".mlp_ln.", ".final_layer_norm."), (".mlp.0.", ".fc1."), (".mlp.2.", ".fc2."),
    (".query.", ".q_proj."), (".key.", ".k_proj."), (".value.", ".v_proj."), (".out.", ".out_proj."),
)


def build_original(seed: int, width: int = 32, layers: int = 2) -> nn.Module:
    """whisper.model.Whisper from dimensions, weights drawn at a scale where every layer matters."""
    require_library("whisper")
    from whisper.model import ModelDimensions, Whisper

    torch.manual_seed(seed)
    dims = ModelDimensions(n_mels=16, n_audio_ctx=12, n_audio_state=width, n_audio_head=4, n_audio_layer=layers,
                           n_vocab=64, n_text_ctx=8, n_text_state=width, n_text_head=4, n_text_layer=layers)
    model = Whisper(dims).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name.split(".")[-2]:  # attn_ln, mlp_ln, ln_post, ln: the layer norms
                p.uniform_(0.8, 1.2) if name.endswith("weight") else p.uniform_(-0.1, 0.1)
            elif p.dim() > 1:
                p.normal_(0, 1.2 / p.shape[-1] ** 0.5)
            else:
                p.uniform_(-0.1, 0.1)
    return model


def inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A mel spectrogram batch and decoder tokens for ``build_original``'s dimensions."""
    generator = torch.Generator().manual_seed(seed + 100)
    return torch.randn(2, 16, 24, generator=generator), torch.randint(0, 64, (2, 6), generator=generator)


def build_port(original: nn.Module) -> nn.Module:
    """transformers' WhisperForConditionalGeneration with ``original``'s weights (eager attention, float32)."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    d = original.dims
    config = WhisperConfig(
        vocab_size=d.n_vocab, num_mel_bins=d.n_mels, encoder_layers=d.n_audio_layer,
        encoder_attention_heads=d.n_audio_head, decoder_layers=d.n_text_layer, decoder_attention_heads=d.n_text_head,
        d_model=d.n_audio_state, encoder_ffn_dim=4 * d.n_audio_state, decoder_ffn_dim=4 * d.n_text_state,
        max_source_positions=d.n_audio_ctx, max_target_positions=d.n_text_ctx, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, bos_token_id=0,
        suppress_tokens=None, begin_suppress_tokens=None)
    config._attn_implementation = "eager"
    port = WhisperForConditionalGeneration(config).eval()
    state = {}
    for key, value in original.state_dict().items():
        for old, new in _RENAMES:
            key = key.replace(old, new)
        state[key] = value
    state["proj_out.weight"] = state["model.decoder.embed_tokens.weight"]
    missing, unexpected = port.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith("k_proj.bias") for k in missing), (missing, unexpected)
    return port
