"""The zoo's transformers models, each from a small config with random weights (imported lazily)."""

from __future__ import annotations

import torch

VOCAB = 64


def _ids(batch: int = 2, seq: int = 6, vocab: int = VOCAB, low: int = 3) -> torch.Tensor:
    return torch.randint(low, vocab, (batch, seq))


def _padded_mask(batch: int = 2, seq: int = 6) -> torch.Tensor:
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[-1, :2] = 0  # left padding in the last row
    return mask


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, attn_implementation="eager",
    )
    model = LlamaForCausalLM(cfg)

    def inputs():
        ids = _ids()
        return (), {"input_ids": ids, "attention_mask": _padded_mask(), "labels": ids.clone(), "use_cache": False}

    return model, inputs


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=16, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=1,
        attn_implementation="eager",
    )
    model = GPT2LMHeadModel(cfg)

    def inputs():
        # use_cache=True: the output holds a DynamicCache object (its repr goes into the JSON)
        return (), {"input_ids": _ids(), "attention_mask": torch.ones(2, 6, dtype=torch.long), "use_cache": True}

    return model, inputs


def _qwen2_bf16():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, attn_implementation="eager",
    )
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)

    def inputs():
        return (), {"input_ids": _ids(), "use_cache": False}

    return model, inputs


def _mistral_fp16():
    from transformers import MistralConfig, MistralForCausalLM

    cfg = MistralConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, sliding_window=None, attn_implementation="eager",
    )
    model = MistralForCausalLM(cfg).to(torch.float16)

    def inputs():
        return (), {"input_ids": _ids(), "attention_mask": _padded_mask(), "use_cache": False}

    return model, inputs


def _bert():
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=32, type_vocab_size=2, attn_implementation="eager",
    )
    model = BertModel(cfg)

    def inputs():
        tt = torch.zeros(2, 6, dtype=torch.long)
        tt[:, 3:] = 1
        return (), {"input_ids": _ids(), "attention_mask": _padded_mask(), "token_type_ids": tt}

    return model, inputs


def _t5():
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(
        vocab_size=VOCAB, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=2,
        relative_attention_num_buckets=8, relative_attention_max_distance=16, decoder_start_token_id=0,
        pad_token_id=0, eos_token_id=1, attn_implementation="eager",
    )
    model = T5ForConditionalGeneration(cfg)

    def inputs():
        return (), {
            "input_ids": _ids(), "attention_mask": _padded_mask(), "labels": _ids(seq=4), "use_cache": False,
        }

    return model, inputs


def _bart():
    from transformers import BartConfig, BartForConditionalGeneration

    cfg = BartConfig(
        vocab_size=VOCAB, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, attn_implementation="eager",
    )
    model = BartForConditionalGeneration(cfg)

    def inputs():
        ids = _ids()
        dec = _ids(seq=4)
        return (), {"input_ids": ids, "decoder_input_ids": dec, "use_cache": False}

    return model, inputs


def _vit():
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(
        image_size=16, patch_size=8, num_channels=3, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, attn_implementation="eager",
    )
    model = ViTModel(cfg)

    def inputs():
        return (), {"pixel_values": torch.randn(1, 3, 16, 16)}

    return model, inputs


def _mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
        attn_implementation="eager",
    )
    model = MixtralForCausalLM(cfg)

    def inputs():
        return (), {"input_ids": _ids(), "use_cache": False, "output_router_logits": True}

    return model, inputs
